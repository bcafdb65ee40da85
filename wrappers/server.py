"""Start and stop a real MLServer on loopback for one artifact folder.

Used by `make serve`, the demo, the load tests, the benchmarks and the tests: the server
always runs in its own process (never imported here), configured through MLServer's
`MLSERVER_*` environment variables, and is stopped by its PID.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from slipway.artifact import SETTINGS_FILE
from slipway.child import stop_with_parent
from slipway.files import FileProblem, read_json
from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK, free_port
from wrappers.repository_access import HOOK, HOOK_ENV, RepositoryAccess
from wrappers.settings import SettingsError

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception): .+$", re.MULTILINE)
_NO_EXCEPTION = "no exception in its log"


# glibc returns a freed block over 128 kB to the OS at once, so every 3 MB JSON body (and the
# lists parsed from it) is mapped again, page by page, on the event loop: ~1.5 ms per MobileNetV2
# request. Blocks under 16 MB now come from the heap, and up to 64 MB of freed heap is kept.
SERVING_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(16 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


class ServerError(RuntimeError):
    """MLServer did not start, or exited; the message names the cause and the log file."""


def model_name(model_dir: Path) -> str:
    """The model's name as `model-settings.json` declares it."""
    path = Path(model_dir) / SETTINGS_FILE
    if not path.is_file():
        raise ServerError(f"{model_dir} is not a model folder: it has no {SETTINGS_FILE} (run `make demo` first)")
    try:
        settings = read_json(path)
    except FileProblem as err:
        raise ServerError(f"{err}: re-export the folder or fix the file") from err
    name = settings.get("name") if isinstance(settings, dict) else None
    if not isinstance(name, str) or not name:
        raise ServerError(f"{path} names no model: it needs a \"name\" (MLServer serves the model under it)")
    return name


def model_names(model_dir: Path) -> list[str]:
    """The models MLServer will load from `model_dir`: the folder itself, or each sub-folder with settings."""
    model_dir = Path(model_dir)
    if (model_dir / SETTINGS_FILE).is_file() or not model_dir.is_dir():
        return [model_name(model_dir)]
    names = [model_name(path.parent) for path in sorted(model_dir.glob(f"*/{SETTINGS_FILE}"))]
    if not names:
        raise ServerError(f"{model_dir} holds no {SETTINGS_FILE}, nor do its sub-folders (run `make demo` first)")
    return names


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
            # (SLIPWAY_REPOSITORY_API, closed unless set; see wrappers.repository_access).
            HOOK_ENV: HOOK,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")])),
        }
    )
    return env


def mlserver_command(model_dir: Path) -> list[str]:
    """`mlserver start MODEL_DIR` with the interpreter running us (so the same venv serves)."""
    return [sys.executable, "-m", "mlserver.cli.main", "start", str(Path(model_dir).resolve())]


@dataclass
class LocalServer:
    """One MLServer process serving `model_dir` on loopback; use it as a context manager."""

    model_dir: Path
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    parallel_workers: int = 0
    ready_timeout_s: float = READY_TIMEOUT_S
    extra_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.model_dir = Path(self.model_dir)
        self.models = model_names(self.model_dir)  # a model folder, or a repository of model folders
        self.model = self.models[0]
        self._workdir = Path(tempfile.mkdtemp(prefix="slipway-mlserver-"))
        self.log_path = self._workdir / "mlserver.log"
        self._process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> LocalServer:
        """Start MLServer and return once the model answers ready (or raise with its log)."""
        metrics_dir = self._workdir / "metrics"
        metrics_dir.mkdir()
        env = server_env(
            host=LOOPBACK,
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            metrics_port=self.metrics_port,
            parallel_workers=self.parallel_workers,
            metrics_dir=metrics_dir,
        )
        env.update(self.extra_env)
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                mlserver_command(self.model_dir),
                cwd=self._workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._stop_process()  # the log stays: the error names it
            raise
        return self

    def _wait_ready(self) -> None:
        waiting = list(self.models)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServerError(
                    f"MLServer exited with code {self._process.returncode}: {self.failure_reason()} (log: {self.log_path})"
                )
            try:
                ready_url = f"{self.http_url}/v2/models/{urllib.parse.quote(waiting[0], safe='')}/ready"
                with urllib.request.urlopen(ready_url, timeout=2) as response:
                    if response.status == 200:
                        waiting.pop(0)
                        if not waiting:
                            return
                        continue
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        raise ServerError(
            f"MLServer was not ready after {self.ready_timeout_s:.0f} s: {self.failure_reason()} (log: {self.log_path})"
        )

    def failure_reason(self) -> str:
        """The first exception line in the server's log."""
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return _first_exception(log) or _NO_EXCEPTION

    def stop(self) -> None:
        """Stop the server, then remove its working folder (log, metrics) unless it crashed meanwhile."""
        crashed = self._process is not None and self._process.poll() not in (None, 0)
        self._stop_process()
        if crashed:
            print(f"MLServer had exited with an error before it was stopped: {self.failure_reason()} (log: {self.log_path})",
                  file=sys.stderr)
        else:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _stop_process(self) -> None:
        process, self._process = self._process, None
        stop_process_group(process)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def stop_process_group(process: subprocess.Popen | None) -> None:
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


def serve_foreground(model_dir: Path, *, host: str, http_port: int, grpc_port: int, metrics_port: int) -> None:
    """Run MLServer on `model_dir` until Ctrl-C or SIGTERM, its log (stdout and stderr) passed through to our stdout.

    MLServer exits 0 when a model fails to load (it logs the error and shuts down), so a server that
    stops before it is asked to raises `ServerError` here, with the first exception in its log."""
    model_name(model_dir)  # fail early, in one line, on a folder that is not an artifact
    try:
        RepositoryAccess.from_env(os.environ)  # the server would refuse to start on it: say why in one line
    except SettingsError as err:
        raise ServerError(str(err)) from err
    metrics_dir = Path(tempfile.mkdtemp(prefix="slipway-metrics-"))
    env = server_env(
        host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        parallel_workers=0, metrics_dir=metrics_dir,
    )
    print(f"serving {model_dir} on http://{host}:{http_port} (gRPC {grpc_port}, metrics {metrics_port})", flush=True)
    # In its own process group, so that a terminal's Ctrl-C reaches only us; we pass it on as SIGTERM,
    # on which MLServer shuts down cleanly (on SIGINT, uvicorn's lifespan task dies with a traceback).
    server = subprocess.Popen(mlserver_command(model_dir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              process_group=0, preexec_fn=stop_with_parent)
    asked_to_stop: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        asked_to_stop.append(signum)
        server.send_signal(signal.SIGTERM)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        reason = _relay_log(server.stdout.fileno(), sys.stdout.buffer)
        status = server.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if server.poll() is None:  # we failed, not the server: it must not outlive us
            server.kill()
            server.wait()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    if not asked_to_stop:
        raise ServerError(f"MLServer stopped by itself (exit status {status}): {reason or _NO_EXCEPTION}")


def _relay_log(source: int, into) -> str | None:
    """Copy the server's log to `into` as it comes, until it ends; return its first exception line."""
    reason, pending = None, b""
    while chunk := os.read(source, 1 << 16):
        into.write(chunk)
        into.flush()
        if reason is None:  # whole lines only: a line cut between two reads would match cut short
            complete, _, pending = (pending + chunk).rpartition(b"\n")
            pending = pending[-(1 << 16):]
            reason = _first_exception(complete.decode(errors="replace"))
    return reason


def _first_exception(log: str) -> str | None:
    """The first exception line in a server's log: usually the whole story."""
    found = _EXCEPTION_LINE.search(log)
    return found.group(0).strip() if found else None


