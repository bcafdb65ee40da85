"""`python -m benchmarks`: its subcommands are benchmarks/cli.py's (`slipway` reaches them through slipway/command.py)."""

from benchmarks.cli import main
from slipway.cli import exit_with

if __name__ == "__main__":
    exit_with(main)
