"""Start and stop a real MLServer on loopback for an artifact folder, or a folder of them.

Used by the smoke and load tests (`loadtest`), the benchmarks and the tests: the server always runs in a
process of its own (Slipway's launcher, `wrappers.launch`; with `launcher=False`, plain `mlserver start`), so
nothing here imports MLServer or the serving package, and a load generator or a benchmark starts a server with
the core alone. It is configured through MLServer's `MLSERVER_*` environment variables
(`slipway.server_process`) and stopped by its PID. Why a server stopped is the launcher's own one line, not
read from its log.
"""

from __future__ import annotations

import shutil
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
from slipway.files import FileProblem, read_json
from slipway.model_repository import RepositoryError, check_unique, settings_files
from slipway.ports import LOOPBACK, free_port
from slipway.server_process import (
    FAILURE_FILE,
    READY_FILE,
    failure_reason,
    launcher_command,
    mlserver_command,
    server_env,
    stop_process_group,
)

READY_TIMEOUT_S = 120.0


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
        raise ServerError(f'{path} names no model: it needs a "name" (MLServer serves the model under it)')
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


@dataclass(kw_only=True)
class LoopbackServer:
    """A server process of ours on loopback ports: where its clients reach it, and its PID (the benchmarks'
    peers are ones too)."""

    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    ready_timeout_s: float = READY_TIMEOUT_S

    def __post_init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

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


def in_cgroup(command: list[str], cgroup: Path | None) -> list[str]:
    """`command` started inside `cgroup` (a folder of a cgroup hierarchy: its limits hold for the command and every
    process it starts, from its first byte); as it is without one."""
    if cgroup is None:
        return command
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup), *command]


def on_cpus(command: list[str], cpus: list[int] | None) -> list[str]:
    """`command` kept to `cpus` (with its threads and children), by util-linux's taskset; as it is without `cpus`."""
    if not cpus:
        return command
    return ["taskset", "--cpu-list", ",".join(str(cpu) for cpu in cpus), *command]


@dataclass
class LocalServer(LoopbackServer):
    """One MLServer process serving `model_dir` on loopback; use it as a context manager.

    `launcher` False starts it with `mlserver start` instead of Slipway's launcher: plain MLServer, as the
    benchmarks' baseline must be (the launcher's own changes would otherwise count for both sides)."""

    model_dir: Path
    parallel_workers: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    launcher: bool = True
    cpus: list[int] | None = None  # the CPUs the server and every process it starts may run on (taskset)
    cgroup: Path | None = None  # a cgroup folder the server runs in, limits and all (`in_cgroup`)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_dir = Path(self.model_dir)
        self.models = model_names(self.model_dir)  # a model folder, or a repository of model folders
        self.model = self.models[0]
        self._workdir = Path(tempfile.mkdtemp(prefix="slipway-mlserver-"))
        self.log_path = self._workdir / "mlserver.log"

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
            command = (
                launcher_command(self.model_dir, self._workdir / FAILURE_FILE, self._workdir / READY_FILE)
                if self.launcher
                else mlserver_command(self.model_dir)
            )
            command = in_cgroup(on_cpus(command, self.cpus), self.cgroup)
            self._process = process = subprocess.Popen(
                command,
                cwd=self._workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(process)
        except BaseException:
            self._stop_process()  # the log stays: the error names it
            raise
        return self

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        waiting = list(self.models)
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServerError(
                    f"MLServer exited with code {process.returncode}: {self.failure_reason()} (log: {self.log_path})"
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
            if not waiting and (not self.launcher or (self._workdir / READY_FILE).exists()):
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

    def wait(self, seconds: float) -> int | None:
        """The server's exit code once it has exited (told to stop by a signal, say), or None if it runs `seconds` on."""
        if self._process is None:
            return None
        try:
            return self._process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Stop the server, then remove its working folder (log, metrics) unless it crashed meanwhile."""
        crashed = self._process is not None and self._process.poll() not in (None, 0)
        if crashed:
            print(
                f"MLServer had exited with an error before it was stopped: {self.failure_reason()} (log: {self.log_path})",
                file=sys.stderr,
            )
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
