"""`python -m export`: its subcommands are export/cli.py's (`slipway` reaches them through slipway/command.py)."""

from export.cli import main
from slipway.cli import exit_with

if __name__ == "__main__":
    exit_with(main)
