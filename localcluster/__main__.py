"""`python -m localcluster` (what `make cluster` runs): its subcommands are localcluster/cli.py's."""

from localcluster.cli import main
from slipway.cli import exit_with

if __name__ == "__main__":
    exit_with(main)
