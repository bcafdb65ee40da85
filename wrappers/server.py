"""Start and stop a real MLServer on loopback for an artifact folder, or a folder of them.

Used by `make serve`, the demo, the load tests, the benchmarks and the tests: the server
always runs in its own process (Slipway's launcher, `wrappers.launch`; MLServer is never
imported here), configured through MLServer's `MLSERVER_*` environment variables, and is
stopped by its PID. Why a server stopped is the launcher's own one line, not read from its log.
"""

from __future__ import annotations

import os
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
from wrappers.model_repository import RepositoryError, check_unique, settings_files
from wrappers.repository_access import HOOK, HOOK_ENV, RepositoryAccess
from wrappers.settings import SettingsError

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
FAILURE_FILE = "failure.txt"  # where the launcher writes why it stopped (`--failure-file`)
READY_FILE = "ready.txt"  # written once every model loaded and, with `frontends: N`, every front end serves


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
    """The models MLServer will load from `model_dir`: an artifact folder, or every artifact folder under it (at any
    depth, as MLServer finds them), each named in its settings; two of one name and version are refused."""
    try:
        paths = settings_files(Path(model_dir))
        models = [(model_name(path.parent), _version(path), path) for path in paths]
        check_unique(models)
    except RepositoryError as err:
        raise ServerError(str(err)) from err
    return [name for name, _, _ in models]


def _version(settings_path: Path) -> str | None:
    """`parameters.version` of a settings file `model_name` has read already (None where unset)."""
    parameters = read_json(settings_path).get("parameters")
    version = parameters.get("version") if isinstance(parameters, dict) else None
    return str(version) if version is not None else None


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


def launcher_command(model_dir: Path, failure_file: Path, ready_file: Path | None = None) -> list[str]:
    """`python -m wrappers.launch MODEL_DIR` with the interpreter running us (so the same venv serves)."""
    return [sys.executable, "-m", "wrappers.launch", str(Path(model_dir).resolve()), "--failure-file", str(failure_file),
            *(["--ready-file", str(ready_file)] if ready_file else [])]


def failure_reason(failure_file: Path, status: int | None) -> str:
    """Why the launcher stopped, in its own words, else its exit status."""
    try:
        return failure_file.read_text().strip()
    except OSError:
        pass
    if status is not None and status < 0:
        return f"it was killed by signal {-status} without saying why"
    return f"it exited with status {status} without saying why" if status else "it stopped by itself"


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
                launcher_command(self.model_dir, self._workdir / FAILURE_FILE, self._workdir / READY_FILE),
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
                while waiting:
                    ready_url = f"{self.http_url}/v2/models/{urllib.parse.quote(waiting[0], safe='')}/ready"
                    with urllib.request.urlopen(ready_url, timeout=2) as response:
                        if response.status != 200:
                            break
                        waiting.pop(0)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            # The launcher's word too: with `frontends: N`, one front end answering ready is not all N serving.
            if not waiting and (self._workdir / READY_FILE).exists():
                return
            time.sleep(0.25)
        raise ServerError(
            f"MLServer was not ready after {self.ready_timeout_s:.0f} s: {self.failure_reason()} (log: {self.log_path})"
        )

    def failure_reason(self) -> str:
        """Why the server stopped, as the launcher said it (one line), else how it ended."""
        status = self._process.poll() if self._process is not None else None
        if status is None and not (self._workdir / FAILURE_FILE).exists():
            return "it is still starting"
        return failure_reason(self._workdir / FAILURE_FILE, status)

    def stop(self) -> None:
        """Stop the server, then remove its working folder (log, metrics) unless it crashed meanwhile."""
        crashed = self._process is not None and self._process.poll() not in (None, 0)
        if crashed:
            print(f"MLServer had exited with an error before it was stopped: {self.failure_reason()} (log: {self.log_path})",
                  file=sys.stderr)
        self._stop_process()
        if not crashed:
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
    """Run the launcher on `model_dir` until Ctrl-C or SIGTERM, its log (stdout and stderr) on our stdout.

    A server that stops before it is asked to raises `ServerError` here, with the launcher's one line on why."""
    model_names(model_dir)  # fail early, in one line, on a folder that is not an artifact folder nor a folder of them
    try:
        RepositoryAccess.from_env(os.environ)  # the server would refuse to start on it: say why in one line
    except SettingsError as err:
        raise ServerError(str(err)) from err
    workdir = Path(tempfile.mkdtemp(prefix="slipway-serve-"))
    metrics_dir, failure_file = workdir / "metrics", workdir / FAILURE_FILE
    metrics_dir.mkdir()
    env = server_env(
        host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
        parallel_workers=0, metrics_dir=metrics_dir,
    )
    print(f"serving {model_dir} on http://{host}:{http_port} (gRPC {grpc_port}, metrics {metrics_port})", flush=True)
    # In its own process group, so that a terminal's Ctrl-C reaches only us; we pass it on as SIGTERM,
    # on which MLServer shuts down cleanly (on SIGINT, uvicorn's lifespan task dies with a traceback).
    server = subprocess.Popen(launcher_command(model_dir, failure_file), env=env, stderr=subprocess.STDOUT,
                              process_group=0, preexec_fn=stop_with_parent)
    asked_to_stop: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        asked_to_stop.append(signum)
        server.send_signal(signal.SIGTERM)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = server.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if server.poll() is None:  # we failed, not the server: it must not outlive us
            server.kill()
            server.wait()
    try:
        if not asked_to_stop or status:
            raise ServerError(f"the server stopped: {failure_reason(failure_file, status)}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
