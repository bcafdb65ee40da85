"""`slipway`, the console script: its version, its help (subcommands and environment variables), a package
command's own help under its new name, one line for an unknown subcommand; `python -m <package>` unchanged."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from slipway.command import CLI_MODULES, DISTRIBUTION, ENVIRONMENT, SUBCOMMANDS
from slipway.paths import PROJECT_ROOT

SCRIPT = Path(sys.executable).parent / "slipway"


def slipway(*args: str) -> subprocess.CompletedProcess:
    if not SCRIPT.is_file():
        pytest.fail(f"no console script at {SCRIPT}: install the checkout (`make setup`, or pip install -e .)")
    return subprocess.run([str(SCRIPT), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_version_is_the_installed_distribution_s():
    from importlib.metadata import version

    result = slipway("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"slipway {version(DISTRIBUTION)}"


def test_help_lists_every_subcommand_and_every_environment_variable():
    result = slipway("--help")
    assert result.returncode == 0, result.stderr
    for sub in SUBCOMMANDS:
        assert f"\n  {sub.name} " in result.stdout, sub.name
    for names, _ in ENVIRONMENT:
        assert names in result.stdout
    for required in ("export", "serve", "deploy", "loadtest", "versions", "tune", "recommend"):
        assert required in {sub.name for sub in SUBCOMMANDS}


def test_serve_help_is_the_serve_command_s_under_its_new_name_with_its_defaults():
    result = slipway("serve", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: slipway serve ")
    for option, default in (("--http-port", "8080"), ("--grpc-port", "8081"), ("--metrics-port", "8082")):
        assert option in result.stdout and f"default {default}" in result.stdout


def test_a_subcommand_s_mistake_names_the_subcommand_as_typed():
    result = slipway("serve", "--http-port", "0")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        "error: slipway serve: argument --http-port: 0 is not a port number: give 1-65535 (see `slipway serve --help`)"
    )


def test_an_unknown_subcommand_is_one_line_naming_the_known_ones():
    result = slipway("srve")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "'srve'" in result.stderr and "serve" in result.stderr


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        (("versions", "list"), "usage: slipway versions list"),
        (("loadtest",), "usage: slipway loadtest"),
        (("export", "import"), "usage: slipway export import"),
    ],
)
def test_delegated_commands_show_their_usage_under_slipway(args, prog):
    result = slipway(*args, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(prog + " "), result.stdout[:200]


def test_python_dash_m_still_works_under_its_own_name():
    result = subprocess.run(
        [sys.executable, "-m", "wrappers", "serve", "--help"],
        cwd=PROJECT_ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m wrappers serve ")


def test_one_table_names_each_package_s_command_line_and_help_loads_none_of_them():
    """CLI_MODULES is the only lazy-import table: every subcommand's package is in it, each package's module
    registers its subcommands and is what `python -m PACKAGE` runs, and `slipway --help` imports none of them."""
    assert {sub.module for sub in SUBCOMMANDS} == set(CLI_MODULES)
    for package, name in CLI_MODULES.items():
        module = importlib.import_module(name)
        assert importlib.import_module(f"{package}.__main__").main is module.main, package
        assert callable(module.register), name
    probe = (
        "import sys; from slipway.command import dispatch; dispatch(['--help']); "
        f"print(sorted(m for m in sys.modules if m in {sorted(set(CLI_MODULES.values()) - {'slipway.__main__'})!r} "
        "or m.split('.')[0] in ('tensorflow', 'keras', 'onnxruntime', 'mlserver', 'locust')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
