"""`make lint`'s import contracts (pyproject.toml's `[tool.importlinter]`, checked by import-linter's `lint-imports`):
they hold on this checkout, and each one fails, naming itself and the import that broke it, when a module breaks
it. A contract that cannot fail checks nothing, so each is broken here on a copy of the packages' sources."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONFIG = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# Slipway's own packages; the other root packages (MLServer, grpc) are read from the venv.
PACKAGES = [name for name in CONFIG["root_packages"] if (PROJECT_ROOT / name / "__init__.py").is_file()]
CONTRACTS = {contract["id"]: contract["name"] for contract in CONFIG["contracts"]}

# Per contract, modules written into the copy that break it: (path, source, the import the report must name).
BREAKS = {
    "mlserver-door": [
        ("wrappers/leak_starlette.py", "import starlette.routing\n", "wrappers.leak_starlette -> starlette"),
        (
            "loadtest/leak_grpc.py",
            "def converters():\n    from mlserver.grpc import converters\n",
            "loadtest.leak_grpc -> mlserver.grpc.converters",
        ),
    ],
    "package-layers": [
        (
            "slipway/leak_layers.py",
            "def session():\n    from engine import session\n",
            "slipway.leak_layers -> engine.session",
        ),
        # siblings: the exporter reaching into the serving package instead of the engine both share
        (
            "export/leak_sibling.py",
            "def metrics():\n    from wrappers.operations import metrics\n",
            "export.leak_sibling -> wrappers.operations.metrics",
        ),
        # the road read backwards: the renderer reaching up into the load tests
        (
            "deployments/leak_road.py",
            "def shapes():\n    from loadtest import shapes\n",
            "deployments.leak_road -> loadtest.shapes",
        ),
    ],
    "serving-leaf": [
        (
            "deployments/leak_leaf.py",
            "def metrics():\n    from wrappers.operations import metrics\n",
            "deployments.leak_leaf -> wrappers.operations.metrics",
        ),
    ],
    "export-acyclic": [
        # a circle of two modules; the report names the import to remove (the side with fewer imports)
        (
            "export/leak_circle_one.py",
            "from export import leak_circle_two\n\n\ndef spec():\n    from export.leak_circle_two import SPEC\n",
            ".leak_circle_two -> .leak_circle_one (1 import)",
        ),
        ("export/leak_circle_two.py", "from export import leak_circle_one\n", ".leak_circle_two -> .leak_circle_one (1 import)"),
    ],
    "deployments-lifecycle": [
        # the manifests reaching up into the rollout path
        (
            "deployments/render/leak_lifecycle.py",
            "def apply():\n    from deployments.rollout import apply\n",
            "deployments.render.leak_lifecycle -> deployments.rollout.apply",
        ),
        # siblings: sizing reaching into the rollout path
        (
            "deployments/sizing/leak_sibling.py",
            "def sequence():\n    from deployments.rollout import sequence\n",
            "deployments.sizing.leak_sibling -> deployments.rollout.sequence",
        ),
    ],
    "cli-through-the-table": [
        # a package starting another's command line in-process instead of calling the module that does the work
        (
            "loadtest/leak_cli_module.py",
            "def export_command():\n    from export import cli\n",
            "loadtest.leak_cli_module -> export.cli",
        ),
        # a sub-package's parser module added by anything but its package's cli.py
        (
            "loadtest/leak_tuner_cli.py",
            "def tune():\n    from loadtest.tuning import cli\n",
            "loadtest.leak_tuner_cli -> loadtest.tuning.cli",
        ),
    ],
    "deployments-cli-on-top": [
        (
            "deployments/delivery/leak_cli.py",
            "def cli():\n    import deployments.__main__\n",
            "deployments.delivery.leak_cli -> deployments.__main__",
        ),
    ],
    "wrappers-wings": [
        # a lower wing reaching up: the regions asking for the state that holds them
        (
            "wrappers/shm/leak_wing.py",
            "def state():\n    from wrappers import process_state\n",
            "wrappers.shm.leak_wing -> wrappers.process_state",
        ),
        # siblings on one floor: the protocol reaching into the run planning
        (
            "wrappers/protocol/leak_sibling.py",
            "def planning():\n    from wrappers.running import planning\n",
            "wrappers.protocol.leak_sibling -> wrappers.running.planning",
        ),
        # a new wing that takes no floor: every child of wrappers is named
        ("wrappers/leak_unplaced.py", "", "- wrappers.leak_unplaced"),
    ],
    "no-mlserver-in-protocol": [
        # Through another module: the V2 codec imports MLServer's types.
        (
            "slipway/leak_protocol.py",
            "def codec():\n    from wrappers.protocol import v2_codec\n",
            "slipway.leak_protocol -> wrappers.protocol.v2_codec",
        ),
    ],
}


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` as `make lint` runs it, on the packages under `root` (ahead of the installed checkout)."""
    assert LINT_IMPORTS.is_file(), f"no {LINT_IMPORTS}: `make setup` installs import-linter (the dev extra)"
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "1000"}  # one contract a line: no wrapping
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_contract_holds_on_this_checkout():
    done = _lint_imports(PROJECT_ROOT)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in done.stdout, (name, done.stdout[-3000:])
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


def test_every_contract_is_broken_somewhere_here():
    assert set(BREAKS) == set(CONTRACTS), "break each contract of [tool.importlinter] in BREAKS, once at least"


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> subprocess.CompletedProcess:
    """`lint-imports` on a copy of the packages' Python sources with every module of BREAKS added."""
    root = tmp_path_factory.mktemp("import-contracts")
    for package in PACKAGES:
        shutil.copytree(
            PROJECT_ROOT / package,
            root / package,
            ignore=lambda folder, names: [
                name
                for name in names
                if name == "__pycache__" or (not name.endswith(".py") and not (Path(folder) / name).is_dir())
            ],
        )
    shutil.copy(PROJECT_ROOT / "pyproject.toml", root / "pyproject.toml")
    for path, source, _ in (item for items in BREAKS.values() for item in items):
        (root / path).write_text(source)
    return _lint_imports(root)


@pytest.mark.parametrize("contract", sorted(BREAKS))
def test_a_broken_contract_fails_lint_naming_itself_the_import_and_what_to_do(broken, contract):
    assert broken.returncode != 0, broken.stdout[-3000:]
    name = CONTRACTS[contract]
    assert f"{name} BROKEN" in broken.stdout, broken.stdout[-5000:]
    after = broken.stdout.split(f"\n{name}\n", 1)[1]  # the contract's own section, after the summary
    guidance = next(item["broken_contract_guidance"] for item in CONFIG["contracts"] if item["id"] == contract)
    assert guidance in after, "the contract's guidance, saying what to fix, follows its broken imports"
    section = after[: after.index(guidance)]
    for _, _, named in BREAKS[contract]:
        assert named in section, (named, section[:3000])
