"""`make image` and `make push` without a Docker engine (deployments/rollout/image_build.py).

The slow tests build the real CPU image with buildah on a base made from Debian's packages (cached in
~/.cache/slipway/images: the first build makes the base and installs the serving packages from PyPI, later ones reuse
every layer), read its config, look through its file system, run Slipway's launcher inside it (buildah run, chroot
isolation: no daemon), and push it to a real CNCF Distribution registry behind htpasswd with a user's credentials.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from deployments.rollout import image_build
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module

TAG = "localhost/slipway-test/mlserver-onnx:test"
BUILD_BOUND_S = float(os.environ.get("SLIPWAY_IMAGE_BUILD_BOUND_S", "900"))


def _one_line(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_missing_builder_is_named_in_one_line(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    result = run_module("deployments", "image", "build", env={"PATH": str(bare)}, check=False, warm=False)
    assert result.returncode != 0
    lines = _one_line(result.stderr)
    assert len(lines) == 1 and "buildah, skopeo, umoci, mmdebstrap" in lines[0] and "make image-tools" in lines[0], lines


def test_image_tools_names_what_it_cannot_install_in_one_line():
    """Where apt-get cannot run as root, `make image-tools` names the missing tools instead of failing in apt-get."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    result = subprocess.run(
        [*as_nobody, "make", "--no-print-directory", "image-tools", "IMAGE_TOOLS=buildah slipway-no-such-tool"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\* ", line)]
    assert lines == [
        "make image-tools: slipway-no-such-tool not installed and apt-get cannot run here as root: "
        "install buildah slipway-no-such-tool with your package manager"
    ]


@pytest.mark.parametrize(
    ("repo", "why"),
    [("team", "names no registry host"), ("registry.example.com/Team", "not a valid reference")],
)
def test_push_refuses_a_repo_without_a_registry_before_building(repo, why, tmp_path):
    result = run_module(
        "deployments", "image", "push", "--repo", repo, env={"SLIPWAY_IMAGE_CACHE": str(tmp_path / "cache")}, check=False
    )
    assert result.returncode != 0
    lines = _one_line(result.stderr)
    assert len(lines) == 1 and f"IMAGE_REPO={repo!r}" in lines[0] and why in lines[0], lines
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_the_dockerfile_base_is_one_pinned_public_image_that_both_stages_start_from():
    text = (PROJECT_ROOT / "deployments" / "images" / "cpu.Dockerfile").read_text()
    froms = [line.split()[1:] for line in text.splitlines() if line.startswith("FROM ")]
    # the first FROM is what `buildah build --from` replaces with the base made here; the others name it
    assert froms == [["python:3.11.14-slim-bookworm", "AS", "base"], ["base", "AS", "build"], ["base"]]
    assert "COPY engine ./engine" in text


def test_make_image_and_push_run_the_daemonless_builder():
    from tests.deployments.test_cli import _make

    image = _make("-n", "image")
    assert image.returncode == 0, image.stderr
    assert "slipway image build --tag slipway/mlserver-onnx:0.1.0 --gpu-tag slipway/mlserver-onnx-gpu:0.1.0" in image.stdout
    assert "docker" not in image.stdout
    pushed = _make("-n", "push", "IMAGE_REPO=127.0.0.1:5000/team")
    assert "slipway image push --repo 127.0.0.1:5000/team --tag slipway/mlserver-onnx:0.1.0" in pushed.stdout


# ------------------------------------------------------------------ the real image


@pytest.fixture(scope="module")
def built() -> image_build.Built:
    if missing := image_build.missing_tools():
        pytest.fail(f"{', '.join(missing)} not installed: `make image-tools` (which `make test` runs) installs them")
    return image_build.build_cpu(TAG, timeout=BUILD_BOUND_S)


def _buildah(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["buildah", *image_build._storage_args(image_build.CACHE_DIR), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "BUILDAH_ISOLATION": "chroot"},
    )


@pytest.fixture(scope="module")
def container(built):
    """A working container of the built image (no process runs until `buildah run`), removed after."""
    result = _buildah("from", "--pull=never", built.tag)
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()
    try:
        yield name
    finally:
        assert _buildah("rm", name).returncode == 0


@pytest.mark.slow
def test_the_image_runs_as_10001_with_the_manifests_command(built):
    config = image_build.image_info(image_build.CACHE_DIR, built.tag)["config"]
    manifest = yaml.safe_load((PROJECT_ROOT / "deployments" / "base" / "seldondeployment.yaml").read_text())
    predictor = manifest["spec"]["predictors"][0]
    spec = predictor["componentSpecs"][0]["spec"]
    args = spec["containers"][0]["args"]
    assert config["User"] == "10001:10001" and spec["securityContext"]["runAsUser"] == 10001
    assert config["Cmd"] == args == ["python", "-m", "wrappers.launch", "/mnt/models"]
    assert "PATH=/opt/slipway/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in config["Env"]
    assert built.size_bytes > 0


@pytest.fixture(scope="module")
def rootfs(built, tmp_path_factory) -> Path:
    """The image as a registry or runtime receives it: written as an OCI layout by buildah, unpacked by umoci."""
    folder = tmp_path_factory.mktemp("unpacked")
    pushed = _buildah("push", built.tag, f"oci:{folder / 'layout'}:test", timeout=600)
    assert pushed.returncode == 0, pushed.stderr
    unpacked = subprocess.run(
        ["umoci", "unpack", "--image", f"{folder / 'layout'}:test", str(folder / "bundle")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    return folder / "bundle" / "rootfs"


@pytest.mark.slow
def test_the_image_holds_the_runtime_and_no_tensorflow(rootfs):
    site = rootfs / "opt" / "slipway" / "lib" / "python3.11" / "site-packages"
    names = {path.name.lower() for path in site.iterdir()}
    assert {"wrappers", "engine", "slipway", "mlserver", "onnxruntime"} <= names
    assert not [name for name in names if name.startswith(("tensorflow", "tf_keras", "keras", "torch"))]
    found = subprocess.run(["find", str(rootfs), "-xdev", "-iname", "*tensorflow*"], capture_output=True, text=True, timeout=300)
    assert found.returncode == 0 and found.stdout == ""
    assert (rootfs / "etc" / "slipway" / "logging.json").is_file()
    assert "slipway:x:10001:10001:" in (rootfs / "etc" / "passwd").read_text()


@pytest.mark.slow
def test_the_launcher_starts_in_the_unpacked_image_as_10001(built, rootfs):
    """chroot into the unpacked file system as the image's user, with the image's environment: no runtime, no daemon."""
    config = image_build.image_info(image_build.CACHE_DIR, built.tag)["config"]
    result = subprocess.run(
        ["chroot", f"--userspec={config['User']}", str(rootfs), "env", "-i", *config["Env"], *config["Cmd"][:3], "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=rootfs,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


@pytest.mark.slow
def test_the_launcher_starts_inside_the_image_as_10001(container):
    result = _buildah("run", "--isolation", "chroot", container, "--", "python", "-m", "wrappers.launch", "--help", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "wrappers.launch" in result.stdout
    who = _buildah(
        "run", "--isolation", "chroot", container, "--", "python", "-c", "import os, engine, wrappers; print(os.getuid())"
    )
    assert who.returncode == 0 and who.stdout.split() == ["10001"], who.stderr


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A CNCF Distribution registry behind htpasswd (Basic), as a team's own registry is."""
    from tests.deployments.test_image_check import PASSWORD, USER, _registry

    bcrypt = pytest.importorskip("bcrypt")
    from localcluster.build import build_all
    from localcluster.components import COMPONENTS

    binary = build_all(tuple(c for c in COMPONENTS if c.name == "registry"))["registry"] / "bin" / "registry"
    folder = tmp_path_factory.mktemp("push-registry")
    (folder / "htpasswd").write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    with _registry(binary, folder, {"htpasswd": {"realm": "slipway", "path": str(folder / "htpasswd")}}) as host:
        yield host


def _auths(folder: Path, host: str, user: str, password: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "auth.json"
    path.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))
    return path


@pytest.mark.slow
def test_push_sends_the_image_with_the_users_credentials(built, registry, tmp_path):
    from deployments.rollout.image_check import resolve
    from tests.deployments.test_image_check import PASSWORD, USER

    destination = f"{registry}/team/mlserver-onnx:test"
    with pytest.raises(image_build.ImageBuildError, match=f"push of {TAG} to {destination} failed: .*`buildah login {registry}`"):
        image_build.push(built.tag, destination, authfile=_auths(tmp_path / "wrong", registry, USER, "not-the-password"))
    good = _auths(tmp_path / "good", registry, USER, PASSWORD)
    digest = image_build.push(built.tag, destination, authfile=good)
    assert digest.startswith("sha256:")
    assert 0 < image_build.pushed_bytes(destination, digest, authfile=good) < built.size_bytes  # compressed layers
    # what `deploy --check-image` asks before applying: the pushed reference resolves, with the same credentials
    assert resolve(destination, config_path=good) == digest
