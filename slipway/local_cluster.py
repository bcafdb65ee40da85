"""What a checkout's local cluster (`make cluster`, the `localcluster` development package) leaves for the packages.

The installed packages never import the development package. `deploy` and `undeploy` find a running local cluster,
and KServe's validation its CRD files, in the places agreed here, which `localcluster` writes to:
- its folder (SLIPWAY_CLUSTER_DIR, default build/cluster): `state.json` lists its processes, `kubeconfig` reaches it;
- its build cache (SLIPWAY_CLUSTER_CACHE, default ~/.cache/slipway/cluster): one folder per component and version.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from slipway.paths import BUILD_DIR

STATE_FILE = "state.json"
KUBECONFIG_FILE = "kubeconfig"


def state_dir() -> Path:
    """The local cluster's folder: SLIPWAY_CLUSTER_DIR, else build/cluster."""
    return Path(os.environ.get("SLIPWAY_CLUSTER_DIR", BUILD_DIR / "cluster"))


def cache_root() -> Path:
    """SLIPWAY_CLUSTER_CACHE, else ~/.cache/slipway/cluster (XDG_CACHE_HOME respected)."""
    if explicit := os.environ.get("SLIPWAY_CLUSTER_CACHE"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "slipway" / "cluster"


def component_dir(name: str, version: str) -> Path:
    """Where the cache holds one component at one version (binaries, or the files copied from its module)."""
    return cache_root() / f"{name}-{version}"


def process_runs(pid: int, binary: str) -> bool:
    """Whether `pid` is alive and still runs `binary` (not a zombie, not a reused PID)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return False
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # ours: reap it
        return False
    return os.fsencode(binary) in command  # argv[0], or argv[1] under a script's interpreter


def running_kubeconfig(folder: Path | None = None) -> Path | None:
    """The kubeconfig of the local cluster recorded in `folder` while every one of its processes runs; else None."""
    folder = state_dir() if folder is None else folder
    try:
        processes = json.loads((folder / STATE_FILE).read_text())["processes"]
        alive = [process_runs(int(process["pid"]), str(process["binary"])) for process in processes]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder / KUBECONFIG_FILE if alive and all(alive) else None
