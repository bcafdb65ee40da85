"""`make image` and `make push` without a Docker engine: buildah builds deployments/images/cpu.Dockerfile.

The Dockerfile's base (its first FROM, the public python:3.11 slim image) is made here instead of pulled:
mmdebstrap writes a root filesystem of Debian bookworm's packages (Python 3.11, venv, CA certificates, passwd for
useradd), buildah imports it as a local image, and the build puts that image in place of the first FROM (`--from`). The base's tarball and
buildah's store (with every layer the build cached, `--layers`) live under ~/.cache/slipway/images, so a second build
reuses both. `push` copies a built image to any registry with the user's credentials (`buildah login` or
`docker login` wrote them), TLS verified everywhere but on loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from slipway.paths import IN_CHECKOUT, PACKAGE_ROOT

IMAGES_DIR = PACKAGE_ROOT / "deployments" / "images"
CACHE_DIR = Path(os.environ.get("SLIPWAY_IMAGE_CACHE", Path.home() / ".cache" / "slipway" / "images"))
TOOLS = ("buildah", "skopeo", "umoci", "mmdebstrap")
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the python slim image gives the Dockerfile: `python` 3.11, `python -m venv` with pip, CA certificates for
# pip's HTTPS, groupadd/useradd; nothing else (mmdebstrap's minbase variant: Essential packages and apt).
BASE_PACKAGES = ("python3.11", "python3.11-venv", "python-is-python3", "ca-certificates", "passwd")
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the Dockerfiles take their base from (their first FROM): what `--gpu` reports when it cannot
GPU_BASE = "docker.io/nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
BUILD_TIMEOUT_S = 1800.0
BUILD_CA_BUNDLE = "/run/slipway-build/ca-certificates.crt"


class ImageBuildError(Exception):
    """A build or push that failed: one line naming what and where its log is."""


@dataclass(frozen=True)
class Built:
    tag: str
    image_id: str
    size_bytes: int
    seconds: float
    base_seconds: float
    base_cached: bool
    log: Path


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def require_tools() -> None:
    if missing := missing_tools():
        raise ImageBuildError(
            f"building images needs {', '.join(TOOLS)} and {', '.join(missing)} is not installed: "
            "`make image-tools` installs them from Debian's packages (as root)"
        )


def _storage_args(cache: Path) -> list[str]:
    # overlay on the cache's file system; chroot isolation (set per command) needs no runtime and works in containers
    driver = os.environ.get("SLIPWAY_IMAGE_STORAGE_DRIVER", "overlay")
    return ["--root", str(cache / "storage"), "--runroot", str(cache / "run"), "--storage-driver", driver]


def buildah(cache: Path, *args: str, log: Path | None = None, timeout: float = 600.0) -> str:
    """Run buildah on the cache's store; its stdout. A failure raises naming the last line it wrote (and the log)."""
    command = ["buildah", *_storage_args(cache), *args]
    env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}
    try:
        if log is None:
            result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
            out, err = result.stdout, result.stderr
        else:
            with log.open("a") as sink:
                sink.write(f"$ {' '.join(command)}\n")
                sink.flush()
                result = subprocess.run(
                    command, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout, env=env, check=False, text=True
                )
            out, err = "", log.read_text()
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"buildah {args[0]} ran past {timeout:.0f}s{_see(log)}") from exc
    if result.returncode != 0:
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "no output")
        raise ImageBuildError(f"buildah {args[0]} failed: {last.strip()}{_see(log)}")
    return out


def _see(log: Path | None) -> str:
    return f" (log: {log})" if log else ""


def base_key() -> str:
    return hashlib.sha256(json.dumps([DEBIAN_SUITE, DEBIAN_MIRROR, BASE_PACKAGES]).encode()).hexdigest()[:12]


def base_tag() -> str:
    return f"localhost/slipway/python-base:3.11-{DEBIAN_SUITE}-{base_key()}"


def _image_exists(cache: Path, tag: str) -> bool:
    command = ["buildah", *_storage_args(cache), "inspect", "--type", "image", tag]
    return subprocess.run(command, capture_output=True, timeout=120, check=False).returncode == 0


def ensure_base(cache: Path, log: Path) -> tuple[float, bool]:
    """The local base image (made once, then reused); (seconds it took, whether it was already there)."""
    began = time.monotonic()
    tag = base_tag()
    if _image_exists(cache, tag):
        return time.monotonic() - began, True
    tarball = cache / f"base-{DEBIAN_SUITE}-{base_key()}.tar"
    if not tarball.is_file():
        partial = tarball.with_suffix(".partial.tar")
        command = [
            "mmdebstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            # the documentation a serving image never reads
            *(f"--dpkgopt=path-exclude=/usr/share/{folder}/*" for folder in ("man", "doc", "locale", "info")),
            "--aptopt=Acquire::Retries 3",
            DEBIAN_SUITE,
            str(partial),
            DEBIAN_MIRROR,
        ]
        with log.open("a") as sink:
            sink.write(f"$ {' '.join(command)}\n")
            sink.flush()
            try:
                result = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, timeout=900, check=False)
            except subprocess.TimeoutExpired as exc:
                partial.unlink(missing_ok=True)
                raise ImageBuildError(f"mmdebstrap ran past 900s making the base (log: {log})") from exc
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ImageBuildError(f"mmdebstrap could not make the base from {DEBIAN_MIRROR} (log: {log})")
        partial.rename(tarball)
    container = buildah(cache, "from", "--name", f"slipway-base-{os.getpid()}", "scratch").strip()
    try:
        buildah(cache, "add", container, str(tarball), "/", log=log)
        buildah(cache, "config", "--env", f"PATH={BASE_PATH}", "--env", "LANG=C.UTF-8", "--cmd", "python3", container)
        buildah(cache, "commit", "--rm", container, tag, log=log)
    except ImageBuildError:
        subprocess.run(["buildah", *_storage_args(cache), "rm", container], capture_output=True, timeout=120, check=False)
        raise
    return time.monotonic() - began, False


def image_info(cache: Path, tag: str) -> dict:
    """buildah's record of a built image: its id, size and OCI config."""
    listed = json.loads(buildah(cache, "images", "--json", tag))
    inspected = json.loads(buildah(cache, "inspect", "--type", "image", tag))
    # its size unpacked, as `docker images` gives it: the layers' sizes from the store's own record of them
    driver = _storage_args(cache)[-1]
    layers = json.loads((cache / "storage" / f"{driver}-layers" / "layers.json").read_text())
    sizes = {layer["diff-digest"]: int(layer.get("diff-size", 0)) for layer in layers if "diff-digest" in layer}
    size = sum(sizes.get(diff_id, 0) for diff_id in inspected["OCIv1"]["rootfs"]["diff_ids"])
    return {"id": listed[0]["id"], "size": size, "config": inspected["OCIv1"]["config"]}


def build_cpu(tag: str, *, cache: Path = CACHE_DIR, timeout: float = BUILD_TIMEOUT_S) -> Built:
    """Build deployments/images/cpu.Dockerfile as `tag` on the local base; layers cached in `cache`."""
    require_tools()
    if not IN_CHECKOUT:
        raise ImageBuildError(f"the image is built from a checkout of Slipway (its pyproject.toml), not from {PACKAGE_ROOT}")
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "build.log"
    log.write_text("")
    base_seconds, base_cached = ensure_base(cache, log)
    began = time.monotonic()
    buildah(
        cache,
        "build",
        *_host_ca_args(),
        "--layers",
        "--force-rm",  # a step that fails leaves no working container in the store
        "--format",
        "docker",  # as `docker build` writes it: the OCI format has no HEALTHCHECK
        "--isolation",
        "chroot",
        "--pull=never",
        "--from",  # in place of the Dockerfile's first FROM (the public image, its `base` stage)
        base_tag(),
        "--file",
        str(IMAGES_DIR / "cpu.Dockerfile"),
        "--tag",
        tag,
        str(PACKAGE_ROOT),
        log=log,
        timeout=timeout,
    )
    seconds = time.monotonic() - began
    info = image_info(cache, tag)
    return Built(tag, info["id"], info["size"], seconds, base_seconds, base_cached, log)


def _host_ca_args() -> list[str]:
    """pip inside the build trusts what pip trusts here (PIP_CERT, else SSL_CERT_FILE): that bundle mounted read-only for
    the RUN steps and named by the build stage's PIP_CERT argument; nothing of it is committed to a layer."""
    bundle = next((os.environ[name] for name in ("PIP_CERT", "SSL_CERT_FILE") if os.environ.get(name)), None)
    if bundle is None or not Path(bundle).is_file():
        return []
    return ["--volume", f"{Path(bundle).resolve()}:{BUILD_CA_BUNDLE}:ro", "--build-arg", f"PIP_CERT={BUILD_CA_BUNDLE}"]


def gpu_base_unreachable(timeout: float = 30.0) -> str | None:
    """Why the GPU image's CUDA base cannot be pulled from here (None: it can)."""
    try:
        result = subprocess.run(
            ["skopeo", "inspect", "--raw", "--retry-times", "0", f"docker://{GPU_BASE}"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"no answer in {timeout:.0f}s"
    if result.returncode == 0:
        return None
    last = next((line.strip() for line in reversed(result.stderr.splitlines()) if line.strip()), "skopeo failed")
    found = re.search(r'msg="(.*)"', last)  # skopeo's logrus line: its message alone, without the name it repeats
    message = found.group(1).replace('\\"', '"') if found else last
    return re.sub(r'^Error parsing image name "[^"]*": ', "", message)


def check_destination(destination: str):
    """The parsed reference of where an image is pushed; an ImageBuildError unless it names a registry host."""
    from deployments.rollout.image_check import ImageError, parse_reference

    try:
        reference = parse_reference(destination)
    except ImageError as err:
        raise ImageBuildError(str(err)) from err
    host = destination.split("/", 1)[0]
    if "/" not in destination or not ("." in host or ":" in host or host == "localhost"):
        raise ImageBuildError(f"{destination!r} names no registry host: send one such as registry.example.com/team")
    return reference


def push(source: str, destination: str, *, cache: Path = CACHE_DIR, authfile: Path | None = None) -> str:
    """Copy a built image to `destination` (registry/repository:tag) with the user's credentials; its digest."""
    loopback = check_destination(destination).registry.rsplit(":", 1)[0] in LOOPBACK_HOSTS
    with tempfile.TemporaryDirectory(prefix="slipway-push-") as folder:
        digest_file = Path(folder) / "digest"
        args = ["push", "--digestfile", str(digest_file), f"--tls-verify={str(not loopback).lower()}"]
        if authfile is not None:
            args += ["--authfile", str(authfile)]
        try:
            buildah(cache, *args, source, f"docker://{destination}", timeout=1200)
        except ImageBuildError as err:
            host = destination.split("/", 1)[0]
            hint = (
                f"; the registry refused these credentials or wants some: log in with `buildah login {host}` (or `docker login {host}`)"
                if re.search(r"unauthorized|authentication required|denied", str(err))
                else ""
            )
            raise ImageBuildError(f"push of {source} to {destination} failed: {err}{hint}") from err
        return digest_file.read_text().strip()


# ---------------------------------------------------------------- `python -m deployments image build|push`

REPORT = "image-build"


def _report(built: Built, gpu: dict, pushed: dict | None = None) -> Path:
    from slipway.reports import read_report, write_report

    runs = dict((read_report(REPORT) or {}).get("runs", {}))
    # cold: the base made from Debian's packages and every layer built; warm: both from the cache
    runs["warm" if built.base_cached else "cold"] = {
        "build_s": round(built.seconds, 1),
        "base_s": round(built.base_seconds, 1),
        "total_s": round(built.seconds + built.base_seconds, 1),
    }
    version = subprocess.run(["buildah", "--version"], capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    payload = {
        "cpu": {
            "tag": built.tag,
            "image_id": built.image_id,
            "size_bytes": built.size_bytes,
            "size_mb": round(built.size_bytes / 1e6, 1),
            "base": base_tag(),
            "base_packages": list(BASE_PACKAGES),
            "builder": version,
            "isolation": "chroot",
            **({"pushed": pushed} if pushed else {}),
        },
        "runs": runs,
        "gpu": gpu,
    }
    return write_report(REPORT, payload)


def _gpu(tag: str) -> dict:
    from slipway.cli import console

    reason = gpu_base_unreachable()
    if reason is None:  # pragma: no cover - only where docker.io answers
        console.print(
            f"the GPU image's base {GPU_BASE} answers here: build it with `docker build -f {IMAGES_DIR}/gpu.Dockerfile`"
        )
        return {"built": False, "base": GPU_BASE, "reason": "not built by buildah here"}
    console.print(
        f"GPU image {tag} not built: its CUDA base {GPU_BASE} cannot be pulled here ({reason}); build "
        "deployments/images/gpu.Dockerfile where docker.io and ghcr.io answer",
        soft_wrap=True,
    )
    return {"built": False, "base": GPU_BASE, "reason": reason}


def _build(args) -> tuple[Built, dict]:
    from slipway.cli import UserError, console

    try:
        with console.status(f"building {args.tag} with buildah (log: {CACHE_DIR / 'build.log'})"):
            built = build_cpu(args.tag, timeout=args.timeout)
    except ImageBuildError as err:
        raise UserError(str(err)) from err
    base = "from the cache" if built.base_cached else f"made from Debian {DEBIAN_SUITE}'s packages in {built.base_seconds:.0f}s"
    console.print(
        f"[green]built {built.tag}[/] ({built.size_bytes / 1e6:.0f} MB, {built.image_id[:12]}) in {built.seconds:.0f}s "
        f"without a Docker engine; base {base}; store {CACHE_DIR / 'storage'}",
        soft_wrap=True,
    )
    return built, (_gpu(args.gpu_tag) if args.gpu_tag else {"built": False, "reason": "not asked for"})


def cmd_build(args) -> int:
    from slipway.cli import console

    built, gpu = _build(args)
    console.print(f"figures in {_report(built, gpu)}", soft_wrap=True)
    return 0


def cmd_push(args) -> int:
    from slipway.cli import UserError, console

    repo = args.repo.strip().rstrip("/")
    destination = f"{repo}/{args.tag.rsplit('/', 1)[-1]}"
    try:  # refused in one line before anything is built
        check_destination(destination)
    except ImageBuildError as err:
        raise UserError(f"IMAGE_REPO={args.repo!r}: {err}") from err
    built, gpu = _build(args)
    try:
        digest = push(built.tag, destination, authfile=args.authfile)
        size = pushed_bytes(destination, digest, authfile=args.authfile)
    except ImageBuildError as err:
        _report(built, gpu)
        raise UserError(str(err)) from err
    _report(built, gpu, pushed={"compressed_bytes": size, "compressed_mb": round(size / 1e6, 1)})
    console.print(f"[green]pushed[/] {destination}@{digest} ({size / 1e6:.0f} MB compressed)", soft_wrap=True)
    if args.gpu_tag:
        console.print(f"GPU image {args.gpu_tag} not pushed: it was not built (above)", soft_wrap=True)
    print(f"{destination}@{digest}")
    return 0


def pushed_bytes(destination: str, digest: str, *, authfile: Path | None = None) -> int:
    """What a node downloads to pull the pushed image: its manifest's compressed layers and config, as the registry
    lists them (skopeo, with the same credentials and TLS rule as the push)."""
    registry = destination.split("/", 1)[0]
    name = destination.rsplit(":", 1)[0] if ":" in destination.split("/")[-1] else destination
    command = ["skopeo", "inspect", "--raw", f"--tls-verify={str(registry.rsplit(':', 1)[0] not in LOOPBACK_HOSTS).lower()}"]
    if authfile is not None:
        command += ["--authfile", str(authfile)]
    result = subprocess.run([*command, f"docker://{name}@{digest}"], capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise ImageBuildError(f"skopeo could not read back {name}@{digest}: {result.stderr.strip().splitlines()[-1:]}")
    manifest = json.loads(result.stdout)
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def add_command(commands) -> None:
    command = commands.add_parser(
        "image",
        help="build the serving image without a Docker engine (buildah), push it",
        description=__doc__.splitlines()[0],
    )
    actions = command.add_subparsers(dest="image_command", required=True)
    for name, func, text in (
        ("build", cmd_build, "build the CPU serving image on a base made from Debian's packages"),
        ("push", cmd_push, "build it (from the cache when built) and push it to --repo"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("--tag", default="slipway/mlserver-onnx:0.1.0", help="the CPU image's name")
        action.add_argument("--gpu-tag", help="the GPU image's name: says whether its CUDA base can be pulled here")
        action.add_argument("--timeout", type=float, default=BUILD_TIMEOUT_S, help="seconds the build may take")
        if name == "push":
            action.add_argument("--repo", required=True, help="registry/namespace, e.g. registry.example.com/team")
            action.add_argument(
                "--authfile", type=Path, help="credentials (default: buildah login's, else ~/.docker/config.json)"
            )
        action.set_defaults(func=func)
