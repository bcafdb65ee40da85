"""`python -m slipway summary`: the table that ends `make demo`."""

# The shared core's own command line (`register`, `main`) lives here, not in a cli.py: slipway/cli.py holds the
# conventions every package's command line shares.

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rich.console import Console

from slipway.cli import ArgumentParser, dispatch, exit_with
from slipway.summary import summary_table

PROG = "python -m slipway"


def cmd_summary(args: argparse.Namespace) -> int:
    Console().print(summary_table())
    return 0


def register(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    """Add `python -m slipway`'s subcommands to `commands`."""
    summary = commands.add_parser("summary", help="print what each step of the demo produced, from reports/")
    summary.set_defaults(func=cmd_summary)


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(PROG, __doc__, register, argv)


if __name__ == "__main__":
    exit_with(main)
