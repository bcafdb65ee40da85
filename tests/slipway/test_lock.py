"""constraints.txt, the pins `make setup` and both images install with: it pins every package pyproject.toml's
extras ask for (the `torch` extra's aside: a CUDA build of several GB no set-up installs by default), in every
environment `make lock` resolves (Linux x86_64 and macOS arm64, Python 3.11 and 3.12), at a version the extra
accepts; this .venv holds what it pins; and `serve` and `deploy` install from it on macOS arm64 (slow: PyPI).

A failure here means pyproject.toml and constraints.txt (or .venv) drifted apart: `make lock` then `make setup`.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from slipway.lock import ENVIRONMENTS, LOCK_FILE, MACOS_TARGET, Environment, canonical, merge, read_pins
from slipway.paths import PROJECT_ROOT

FIX = "regenerate the lock with `make lock`, then `make setup`"


def _extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    return {name: [Requirement(text) for text in requirements] for name, requirements in project["optional-dependencies"].items()}


def _pins() -> list[tuple[str, str, str | None]]:
    assert LOCK_FILE.is_file(), f"no {LOCK_FILE.name} in the checkout: {FIX}"
    return read_pins(LOCK_FILE.read_text())


def _pinned_in(environment: dict[str, str]) -> dict[str, list[str]]:
    """Canonical name -> the versions the lock pins where `environment`'s markers hold (one, when it is right)."""
    pinned: dict[str, list[str]] = {}
    for name, version, marker in _pins():
        if marker is None or Marker(marker).evaluate(environment):
            pinned.setdefault(canonical(name), []).append(version)
    return pinned


def test_the_extras_make_lock_resolves_are_every_extra_but_torch():
    from slipway.lock import EXTRAS

    assert set(EXTRAS) == set(_extras()) - {"torch"}


@pytest.mark.parametrize("environment", ENVIRONMENTS, ids=lambda env: f"{env.platform.name}-py{env.python}")
def test_every_package_the_extras_ask_for_is_pinned_once_at_a_version_they_accept(environment: Environment):
    pinned = _pinned_in(environment.variables)
    twice = {name: versions for name, versions in pinned.items() if len(versions) > 1}
    assert not twice, f"{LOCK_FILE.name} pins these twice on {environment.platform.name}: {twice}; {FIX}"
    problems = []
    for extra in environment.platform.extras:
        for requirement in _extras()[extra]:
            if requirement.marker is not None and not requirement.marker.evaluate(environment.variables):
                continue
            [version] = pinned.get(canonical(requirement.name), [None])
            if version is None:
                problems.append(f"[{extra}] {requirement} is not pinned")
            elif not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"[{extra}] {requirement} does not accept the pinned {version}")
    assert not problems, f"{LOCK_FILE.name} on {environment.platform.name}: " + "; ".join(problems) + f": {FIX}"


def test_merged_pins_carry_markers_only_where_environments_differ():
    linux_311, linux_312, mac_311, mac_312 = ENVIRONMENTS
    lines = merge(
        {
            linux_311: {"numpy": "2.4.6", "gevent": "26.9.0", "onnxruntime-gpu": "1.31.1"},
            linux_312: {"numpy": "2.4.6", "gevent": "26.9.0", "onnxruntime-gpu": "1.31.1"},
            mac_311: {"numpy": "2.4.6", "gevent": "25.5.1"},
            mac_312: {"numpy": "2.4.6", "gevent": "26.9.0"},
        }
    )
    assert lines == [
        "gevent==25.5.1 ; sys_platform == 'darwin' and python_version == '3.11'",
        "gevent==26.9.0 ; (sys_platform == 'linux') or (sys_platform == 'darwin' and python_version == '3.12')",
        "numpy==2.4.6",
        "onnxruntime-gpu==1.31.1 ; sys_platform == 'linux'",
    ]


def test_this_venv_holds_the_pinned_versions():
    installed = {canonical(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}
    here = _pinned_in({})  # markers evaluated for this interpreter and machine
    differ = [
        f"{name} {installed[name]} (pinned {versions[0]})"
        for name, versions in sorted(here.items())
        if name in installed and installed[name] != versions[0]
    ]
    assert not differ, (
        f".venv has drifted from {LOCK_FILE.name}: {', '.join(differ)}; `make setup` installs the pins "
        f"(or, when the newer versions are wanted, `make lock` first)"
    )
    setup_extras = {"serve", "export", "loadtest", "deploy", "dev"}  # the Makefile's EXTRAS
    missing = sorted(
        {
            requirement.name
            for extra in setup_extras
            for requirement in _extras()[extra]
            if (requirement.marker is None or requirement.marker.evaluate()) and canonical(requirement.name) not in installed
        }
        - {"onnxruntime"}
    )  # GPU=1 installs onnxruntime-gpu in its place
    assert not missing, f".venv lacks {missing}: `make setup`"


@pytest.mark.slow
def test_serve_and_deploy_install_on_macos_arm64_from_the_lock(tmp_path):
    """What pip on an Apple-silicon Mac would install, asked of PyPI: wheels only, no TensorFlow, no torch.

    pip's --platform picks wheels for the Mac but evaluates markers for this machine, so the lock's lines are
    chosen here, as a Mac would choose them, into a constraints file without markers."""
    [mac] = [
        environment for environment in ENVIRONMENTS if environment.platform.name == "macos-arm64" and environment.python == "3.11"
    ]
    as_on_a_mac = tmp_path / "constraints-macos.txt"
    as_on_a_mac.write_text("".join(f"{name}=={versions[0]}\n" for name, versions in _pinned_in(mac.variables).items()))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--quiet",
            "--ignore-installed",
            "--only-binary=:all:",
            "--platform",
            f"macosx_{MACOS_TARGET.replace('.', '_')}_arm64",
            "--python-version",
            "3.11",
            "--target",
            str(tmp_path / "target"),
            "--report",
            str(tmp_path / "report.json"),
            "-c",
            str(as_on_a_mac),
            f"{PROJECT_ROOT}[serve,deploy]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"serve,deploy do not install on macOS arm64 from {LOCK_FILE.name}: {result.stderr[-3000:]}"
    import json

    names = {canonical(item["metadata"]["name"]) for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    assert {"mlserver", "onnxruntime", "kubernetes"} <= names
    assert not {name for name in names if name.startswith(("tensorflow", "torch", "onnxruntime-gpu"))}


@pytest.mark.parametrize("image", ["cpu", "gpu"])
def test_both_images_install_from_the_lock(image):
    dockerfile = (PROJECT_ROOT / "deployments" / "images" / f"{image}.Dockerfile").read_text()
    copies = [line.split()[1:-1] for line in dockerfile.splitlines() if line.startswith("COPY ") and "--from" not in line]
    assert any("constraints.txt" in sources for sources in copies), f"{image}.Dockerfile does not COPY constraints.txt"
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs


def test_make_setup_installs_from_the_lock_and_reinstalls_when_it_changes():
    plan = subprocess.run(
        ["make", "-n", "-B", "setup", "setup-torch", "VENV=.venv-plan-only"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and " -e " in line]
    assert len(installs) == 2 and all("-c constraints.txt" in line for line in installs), installs
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "$(STAMP): pyproject.toml constraints.txt" in makefile
