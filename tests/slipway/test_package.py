"""The wheel built from this checkout, as `pip install` would build it: Slipway's packages and their data,
the licence, the `slipway` script, and no tests, test data or benchmark records; no TensorFlow in `serve` or
`deploy`, TensorFlow's build chosen by platform in `export`. Installed from that wheel (no checkout around it),
Slipway writes under the current directory or --workdir, and finds the files it ships beside its code."""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from slipway.command import DISTRIBUTION
from slipway.paths import PROJECT_ROOT

PACKAGES = {"export", "engine", "wrappers", "deployments", "loadtest", "slipway", "benchmarks"}


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory) -> Path:
    """Build from a copy of what git would commit (tracked and new, not ignored), so nothing built here leaks in."""
    source = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (
        f"building the wheel failed (the dev extra installs `build` and setuptools>=77: "
        f"`make setup`):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    [built] = out.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel(wheel_file) -> zipfile.ZipFile:
    with zipfile.ZipFile(wheel_file) as opened:
        yield opened


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    [name] = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def test_the_wheel_holds_slipway_s_packages_and_no_tests_data_or_records(wheel):
    names = wheel.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == PACKAGES
    assert not [name for name in names if "/tests/" in name or name.startswith("tests/") or "/test_" in name]
    assert not [name for name in names if name.endswith((".npz", ".onnx", ".keras", ".png", ".pyc"))]
    assert not [name for name in names if name.startswith(("reports/", "build/", "docs/", "localcluster/"))]
    assert "wrappers/runtime.py" in names and "deployments/base/seldondeployment.yaml" in names
    # The artifact contract in the shared core; the benchmarks beside the serving package, not inside it.
    assert "slipway/artifact.py" in names and "benchmarks/__main__.py" in names
    assert not [name for name in names if name.startswith(("wrappers/bench/", "wrappers/artifact.py"))]


def test_the_wheel_carries_the_licence_the_script_and_the_spdx_expression(wheel):
    names = wheel.namelist()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert _metadata(wheel)["License-Expression"] == "Apache-2.0"
    [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    assert "slipway = slipway.command:main" in wheel.read(entry_points).decode()


def test_the_serving_and_deploy_extras_bring_no_tensorflow(wheel):
    requirements = _metadata(wheel).get_all("Requires-Dist")
    for extra in ("serve", "gpu", "deploy"):
        of_extra = [req for req in requirements if f'extra == "{extra}"' in req]
        assert of_extra and not [req for req in of_extra if req.lower().startswith(("tensorflow", "tf2onnx", "torch"))]
    assert not [req for req in requirements if "extra ==" not in req and req.lower().startswith(("tensorflow", "torch"))]


# Where TensorFlow 2.21 has wheels for Python 3.11 (PyPI, checked by `pip install --dry-run --platform ...`):
# tensorflow-cpu on Linux x86_64 and Windows, tensorflow on macOS arm64 (tensorflow-cpu has none for macOS).
PLATFORMS = {
    "linux-x86_64": ({"sys_platform": "linux", "platform_machine": "x86_64"}, {"tensorflow-cpu"}),
    "windows-amd64": ({"sys_platform": "win32", "platform_machine": "AMD64"}, {"tensorflow-cpu"}),
    "macos-arm64": ({"sys_platform": "darwin", "platform_machine": "arm64"}, {"tensorflow"}),
}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_training_asks_for_the_tensorflow_build_the_platform_has_and_nothing_else_asks_for_tensorflow(wheel, platform):
    environment, expected = PLATFORMS[platform]
    requirements = [Requirement(text) for text in _metadata(wheel).get_all("Requires-Dist")]
    for extra in ("serve", "gpu", "deploy", "loadtest", "export", "dev", "cloud"):
        asked = {
            req.name for req in requirements if req.marker is not None and req.marker.evaluate({**environment, "extra": extra})
        }
        tensorflow = {name for name in asked if name.startswith("tensorflow")}
        assert tensorflow == (expected if extra == "export" else set()), (extra, tensorflow)
    torch_asked = [req for req in requirements if req.name == "torch"]
    assert torch_asked and all(req.marker.evaluate({**environment, "extra": "torch"}) for req in torch_asked)
    assert not [req for req in torch_asked if req.marker.evaluate({**environment, "extra": "dev"})]


# Run by the installed copy, from a folder that is not the checkout: what slipway.paths resolved, and the shipped
# files it reads. Prints one JSON object.
_REPORT_PATHS = """
import json, sys
from slipway import paths
from deployments.render.overlay import DEPLOYMENTS_DIR
shipped = [DEPLOYMENTS_DIR / "base" / "seldondeployment.yaml", DEPLOYMENTS_DIR / "overlays" / "cpu" / "kustomization.yaml",
           DEPLOYMENTS_DIR / "components" / "autoscaling-rps" / "kustomization.yaml", paths.EXAMPLE_SLO]
print(json.dumps({"module": paths.__file__, "in_checkout": paths.IN_CHECKOUT, "workdir": str(paths.WORKDIR),
                  "build": str(paths.BUILD_DIR), "reports": str(paths.REPORTS_DIR), "store": str(paths.MODEL_STORE_DIR),
                  "missing": [str(path) for path in shipped if not path.is_file()]}))
"""


def _clean_environment(**more: str) -> dict[str, str]:
    """This process's environment without Slipway's path variables (the test sets the ones it means)."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SLIPWAY_WORKDIR", "SLIPWAY_BUILD_DIR", "SLIPWAY_REPORTS_DIR", "PYTHONPATH")
    }
    return {**kept, **more}


@pytest.fixture(scope="module")
def installed(wheel_file, tmp_path_factory) -> Path:
    """The wheel installed as pip installs it, without its dependencies (this venv has them), into a folder."""
    target = tmp_path_factory.mktemp("site-packages")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            str(wheel_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return target


def _run_installed(installed: Path, cwd: Path, *args: str, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_environment(PYTHONPATH=str(installed), **environment),
    )


def test_installed_slipway_writes_under_the_current_directory_and_finds_what_it_ships(installed, tmp_path):
    result = _run_installed(installed, tmp_path, "-c", _REPORT_PATHS)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["module"]).is_relative_to(installed.resolve()), "the checkout's copy was imported, not the installed one"
    assert found["in_checkout"] is False and found["missing"] == []
    assert (found["workdir"], found["build"], found["reports"]) == (
        str(tmp_path),
        str(tmp_path / "build"),
        str(tmp_path / "reports"),
    )
    assert (tmp_path / found["store"]).resolve() == (tmp_path / "model-store").resolve()

    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    result = _run_installed(installed, tmp_path, "-c", _REPORT_PATHS, SLIPWAY_WORKDIR=str(elsewhere))
    found = json.loads(result.stdout)
    assert (found["build"], found["reports"], found["store"]) == (
        str(elsewhere / "build"),
        str(elsewhere / "reports"),
        str(elsewhere / "model-store"),
    )
    assert not [path for path in installed.rglob("*") if path.name in ("build", "reports", "model-store")]


def test_installed_slipway_s_workdir_option_moves_the_model_store_and_names_a_missing_folder(installed, tmp_path):
    command = "import sys; from slipway.command import main; main(sys.argv[1:])"
    work = tmp_path / "work"
    work.mkdir()
    result = _run_installed(installed, tmp_path, "-c", command, "--workdir", str(work), "versions", "list")
    assert result.returncode == 2
    assert f"no model store at {work / 'model-store'}" in " ".join(result.stderr.split())

    result = _run_installed(installed, tmp_path, "-c", command, "--workdir", str(tmp_path / "absent"), "summary")
    assert result.returncode == 2
    assert f"create it (mkdir -p {tmp_path / 'absent'})" in " ".join(result.stderr.split())


def test_from_the_checkout_outputs_stay_in_the_checkout_whatever_the_current_directory(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _REPORT_PATHS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_environment(PYTHONPATH=str(PROJECT_ROOT)),
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["in_checkout"] is True and found["missing"] == []
    assert (found["build"], found["reports"], found["store"]) == (
        str(PROJECT_ROOT / "build"),
        str(PROJECT_ROOT / "reports"),
        "model-store",
    )


def test_installed_slipway_sends_the_local_cluster_to_a_checkout(installed, tmp_path):
    """The wheel ships no local cluster (a development package): its command says where it runs, in one line."""
    command = "import sys; from slipway.command import main; main(sys.argv[1:])"
    result = _run_installed(installed, tmp_path, "-c", command, "cluster", "up")
    assert result.returncode == 2
    assert " ".join(result.stderr.split()) == " ".join(
        "error: the local cluster is a development tool of a Slipway checkout: clone the repository and run `make cluster` "
        "there (python -m localcluster)".split()
    )
    imported = _run_installed(installed, tmp_path, "-c", "import localcluster")
    assert "No module named 'localcluster'" in imported.stderr
