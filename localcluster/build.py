"""Build the control plane's binaries from their Go modules, once, into a cache keyed by version.

Each component lands in `<cache>/<name>-<version>/` (binaries and the files the control plane
reads from its module), written whole or not at all; a folder whose `build.json` matches the
module's go.mod, go.sum and the Go toolchain is used as it is. The first build on a fresh
machine compiles Kubernetes and takes a long while; later ones take a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from localcluster.components import COMPONENTS, Component
from slipway import local_cluster
from slipway.cli import console
from slipway.local_cluster import cache_root

BUILD_RECORD = "build.json"


class BuildError(RuntimeError):
    """A build could not run or failed; the message names the cause and the log."""


def component_dir(component: Component) -> Path:
    return local_cluster.component_dir(component.name, component.version)


def go_binary() -> str:
    """The `go` command, or a BuildError saying how to get one."""
    found = shutil.which("go")
    if found is None:
        raise BuildError(
            "`go` is not on PATH: the local cluster is built from Go modules; install Go 1.25 or newer "
            "(https://go.dev/dl, or `apt-get install golang`) and run `make cluster` again"
        )
    return found


def _go_env() -> dict[str, str]:
    # readonly: go.sum pins every module; local: never fetch another toolchain; no cgo: static binaries.
    return {**os.environ, "GOFLAGS": "-mod=readonly -trimpath", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}


def _build_key(component: Component, go: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((component.module_dir / name).read_bytes())
    toolchain = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    digest.update(toolchain.encode())
    return digest.hexdigest()


def is_built(component: Component, key: str) -> bool:
    folder = component_dir(component)
    try:
        record = json.loads((folder / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return (
        record.get("key") == key
        and all((folder / "bin" / binary.name).is_file() for binary in component.binaries)
        and all((folder / "share" / name).is_file() for name in component.files.values())
    )


def cached(component: Component) -> bool:
    """Whether `component` is built in the cache for its go.mod, go.sum and this machine's Go (False without Go)."""
    go = shutil.which("go")
    return go is not None and is_built(component, _build_key(component, go))


def _module_dir(component: Component, module: str, go: str, log) -> Path:
    """Where the Go module cache holds `module` at the version `component`'s go.mod pins (downloading it)."""
    result = subprocess.run(
        [go, "mod", "download", "-json", module], cwd=component.module_dir, env=_go_env(), capture_output=True, text=True
    )
    log.write(result.stdout + result.stderr)
    try:
        return Path(json.loads(result.stdout)["Dir"])
    except (ValueError, KeyError) as err:
        last = ((result.stderr or result.stdout).strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"go mod download {module} failed in {component.module_dir}: {last}") from err


def _build_into(component: Component, staging: Path, go: str, log) -> None:
    (staging / "bin").mkdir()
    (staging / "share").mkdir()
    for binary in component.binaries:
        command = [
            go,
            "build",
            "-ldflags",
            " ".join(("-s", "-w", *binary.ldflags)),
            "-o",
            str(staging / "bin" / binary.name),
            binary.package,
        ]
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        result = subprocess.run(command, cwd=component.module_dir, env=_go_env(), stdout=log, stderr=subprocess.STDOUT)
        if result.returncode != 0:
            raise BuildError(f"go build {binary.package} failed (exit {result.returncode}); see {log.name}")
    for (module, path), name in component.files.items():
        shutil.copyfile(_module_dir(component, module, go, log) / path, staging / "share" / name)


def build_component(component: Component, go: str) -> Path:
    """Build one component into its cache folder unless it is already there; return the folder."""
    key = _build_key(component, go)
    final = component_dir(component)
    if is_built(component, key):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".building"))
    log_path = final.parent / f"{final.name}.build.log"
    began = time.monotonic()
    try:
        with open(log_path, "w") as log:
            _build_into(component, staging, go, log)
        record: dict[str, object] = {"key": key, "component": component.name, "version": component.version}
        # how long it took, with whatever Go's own build cache held: the cold figures in docs/local-cluster.md
        record |= {"build_s": round(time.monotonic() - began, 1), "cpu_count": os.cpu_count()}
        (staging / BUILD_RECORD).write_text(json.dumps(record, indent=2))
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def build_all(components: tuple[Component, ...] = COMPONENTS) -> dict[str, Path]:
    """Every component's cache folder, building what is missing with a progress line per component."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    go = go_binary()
    keys = {component.name: _build_key(component, go) for component in components}
    todo = [component for component in components if not is_built(component, keys[component.name])]
    if todo:
        console.print(
            f"building {', '.join(f'{c.name} {c.version}' for c in todo)} from Go modules into "
            f"{cache_root()} (once: about 20 minutes on 2 cores with the module downloads, 35 with the tests' tools, 10 more for a real node's kubelet and kube-proxy; later starts take seconds)",
            soft_wrap=True,
        )
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, disable=not todo
    ) as progress:
        for component in todo:
            task = progress.add_task(f"go build {component.name} {component.version}", total=1)
            began = time.monotonic()
            build_component(component, go)
            progress.update(task, completed=1, visible=False)
            # a line per component, also where no terminal shows the live progress (CI's log)
            progress.console.print(f"built {component.name} {component.version} in {time.monotonic() - began:.0f}s")
    return {component.name: component_dir(component) for component in components}
