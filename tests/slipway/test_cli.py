"""The shared command-line conventions: one line per mistake, exit 2, the user's text printed as given."""

from __future__ import annotations

import pytest

from slipway.cli import EXIT_USER_ERROR, ArgumentParser, UserError, run


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m tool")
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render")
    render.add_argument("--autoscaling", choices=["cpu", "rps"], default="cpu")
    return parser


def test_a_usage_mistake_is_one_line_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["render", "--autoscaling", "foo"])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == EXIT_USER_ERROR
    assert err.count("\n") == 0 and "usage:" not in err
    assert "python -m tool render" in err and "--autoscaling" in err and "'foo'" in err and "--help" in err


def test_help_still_prints_the_whole_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["render", "--help"])
    assert exited.value.code == 0 and "usage: python -m tool render" in capsys.readouterr().out


def test_user_text_in_square_brackets_survives(capsys):
    def main(argv):
        raise UserError("model dir 'runs[old]' is not a folder; install 'slipway[cloud]'")

    assert run(main, []) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "runs[old]" in err and "slipway[cloud]" in err
