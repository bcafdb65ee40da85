"""`python -m wrappers`: its subcommands are wrappers/cli.py's (`slipway` reaches them through slipway/command.py)."""

from slipway.cli import exit_with
from wrappers.cli import main

if __name__ == "__main__":
    exit_with(main)
