"""`python -m slipway summary`: the table that ends `make demo`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console

from slipway.cli import ArgumentParser, exit_with


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m slipway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("summary", help="print what each step of the demo produced, from reports/")
    parser.parse_args(argv)
    from slipway.summary import summary_table

    Console().print(summary_table())
    return 0


if __name__ == "__main__":
    exit_with(main)
