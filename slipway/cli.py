"""Command-line conventions shared by every `python -m <package>`.

A user's mistake (a missing file, a bad flag value) is a `UserError`: it prints one line
naming what was wrong and what to do instead, and the command exits non-zero. Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input from the user; the message is the whole story, so no traceback."""


# Set by the `slipway` command (slipway/command.py) before it hands over to a package's `main`: the program
# names that package's parsers give themselves ("python -m wrappers serve"), as the user typed them ("slipway serve").
PROG_RENAMES: dict[str, str] = {}


def renamed_prog(prog: str | None) -> str | None:
    """`prog` with the longest prefix in PROG_RENAMES (a whole word or more) replaced by what the user typed."""
    if prog is None:
        return prog
    for old in sorted(PROG_RENAMES, key=len, reverse=True):
        if prog == old or prog.startswith(old + " "):
            return PROG_RENAMES[old] + prog[len(old) :]
    return prog


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's default in `--help`, once: where its help text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            action.default in (None, False, argparse.SUPPRESS)
            or action.option_strings == []
            or "default" in text.lower()
            or isinstance(action.default, (list, tuple))
            and not action.default
        ):
            return action.help
        return f"{text} (default: %(default)s)".lstrip()


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line naming the flag and pointing at `--help`, not the whole usage text,
    and `--help` shows every default."""

    def __init__(
        self,
        prog: str | None = None,
        formatter_class: type[argparse.HelpFormatter] = DefaultsHelpFormatter,
        **kwargs: Any,
    ) -> None:
        super().__init__(prog=renamed_prog(prog), formatter_class=formatter_class, **kwargs)

    def error(self, message: str) -> NoReturn:
        console.print(
            f"[bold red]error:[/] {escape(self.prog)}: {escape(message)} (see `{escape(self.prog)} --help`)", soft_wrap=True
        )
        sys.exit(EXIT_USER_ERROR)


def one_line(err: ValidationError, whole: str = "value") -> str:
    """Pydantic's report as one line, `field: problem; field: problem` (`whole` names an error about the whole)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in issue['loc']) or whole}: {issue['msg'].removeprefix('Value error, ')}"
        for issue in err.errors()
    )


def first_line(err: Exception) -> str:
    """An exception's message cut to its first line (its type's name when it has none)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def run(main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run a command's `main`, turning `UserError` (and Ctrl-C) into one line and an exit code."""
    try:
        return int(main(argv) or 0)
    except UserError as err:
        console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)  # user text may hold [brackets]
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130


def dispatch(prog: str, description: str, register: Callable[[Any], None], argv: Sequence[str] | None = None) -> int:
    """Parse `argv` with the subcommands `register` adds to a parser named `prog`, and run the one chosen: every
    package's `cli.main`."""
    parser = ArgumentParser(prog=prog, description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    register(commands)
    args = parser.parse_args(argv)
    return int(args.func(args))


def exit_with(main: Callable[[Sequence[str] | None], int | None]) -> None:
    """`sys.exit(run(main))`, for `__main__` modules."""
    sys.exit(run(main))
