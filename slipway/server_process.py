"""A Slipway server as a process seen from the one that starts it: its command, its environment, how it says
why it stopped, and how it is stopped.

`LocalServer` (tests, load tests, benchmarks) and `python -m wrappers serve` start the same launcher
(`python -m wrappers.launch`, named here, never imported: MLServer stays out of the client's process) with the
same `MLSERVER_*` environment, and read the launcher's one line on why it stopped from its `--failure-file`
rather than from its log. The repository-API guard's hook lives here too, the one home of a setting that the
environment sets, the launcher checks and the serving images and manifests write.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from slipway.paths import PROJECT_ROOT

STOP_TIMEOUT_S = 15.0
FAILURE_FILE = "failure.txt"  # where the launcher writes why it stopped (`--failure-file`)
READY_FILE = "ready.txt"  # written once every model loaded and, with `frontends: N`, every front end serves
# The MLServer setting that imports the guard before MLServer builds its servers (see wrappers.repository_api).
HOOK_ENV = "MLSERVER_MODEL_REPOSITORY_IMPLEMENTATION"
HOOK = "wrappers.repository_api.GuardedRepository"

# glibc returns a freed block over 128 kB to the OS at once, so every 3 MB JSON body (and the
# lists parsed from it) is mapped again, page by page, on the event loop: ~1.5 ms per MobileNetV2
# request. Blocks under 16 MB now come from the heap, and up to 64 MB of freed heap is kept.
SERVING_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(16 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


def server_env(
    *, host: str, http_port: int, grpc_port: int, metrics_port: int, parallel_workers: int, metrics_dir: Path
) -> dict[str, str]:
    """MLServer's settings as environment variables, plus a PYTHONPATH that finds `wrappers`."""
    env = dict(os.environ)
    env.update(
        {
            "MLSERVER_HOST": host,
            "MLSERVER_HTTP_PORT": str(http_port),
            "MLSERVER_GRPC_PORT": str(grpc_port),
            "MLSERVER_METRICS_PORT": str(metrics_port),
            # 0 serves in the main process: on few cores the inter-process hop costs 35-45%.
            "MLSERVER_PARALLEL_WORKERS": str(parallel_workers),
            "MLSERVER_METRICS_DIR": str(metrics_dir),
            # MLServer's default (debug) logs every request at INFO and itself at DEBUG: CPU the server needs.
            "MLSERVER_DEBUG": "false",
            # MLServer gzips every REST response over 1 kB that a client accepts gzip for, at level 9, on its
            # event loop: ~1.2 ms per MobileNetV2 response, more CPU than the bytes saved on a cluster network.
            "MLSERVER_GZIP_ENABLED": "false",
            **SERVING_MALLOC_ENV,
            # MLServer imports this before it builds its servers: it guards the model repository API
            # (SLIPWAY_REPOSITORY_API, closed unless set; see slipway.repository_access).
            HOOK_ENV: HOOK,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")])),
        }
    )
    return env


def launcher_command(model_dir: Path, failure_file: Path, ready_file: Path | None = None) -> list[str]:
    """`python -m wrappers.launch MODEL_DIR` with the interpreter running us (so the same venv serves)."""
    return [
        sys.executable,
        "-m",
        "wrappers.launch",
        str(Path(model_dir).resolve()),
        "--failure-file",
        str(failure_file),
        *(["--ready-file", str(ready_file)] if ready_file else []),
    ]


def mlserver_command(model_dir: Path) -> list[str]:
    """`mlserver start MODEL_DIR` as MLServer's own users run it (the benchmarks' baseline), in our venv."""
    return [sys.executable, "-m", "mlserver.cli.main", "start", str(Path(model_dir).resolve())]


def failure_reason(failure_file: Path, status: int | None) -> str:
    """Why the launcher stopped, in its own words, else its exit status."""
    try:
        return failure_file.read_text().strip()
    except OSError:
        pass
    if status is not None and status < 0:
        return f"it was killed by signal {-status} without saying why"
    return f"it exited with status {status} without saying why" if status else "it stopped by itself"


def stop_process_group(process: subprocess.Popen[Any] | None) -> None:
    """SIGTERM the process group of a process started in a session of its own, by its PID, then SIGKILL
    if it will not go."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
