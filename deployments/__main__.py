"""`python -m deployments`: its subcommands are deployments/cli.py's (`slipway` reaches them through slipway/command.py)."""

from deployments.cli import main
from slipway.cli import exit_with

if __name__ == "__main__":
    exit_with(main)
