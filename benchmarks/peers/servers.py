"""Start and stop a peer server (KServe, PyTriton) on loopback ports, in its own virtualenv.

Each peer's server script (`kserve_server.py`, `pytriton_server.py` beside this file) runs with the
Python of that peer's virtualenv, in a session of its own, and is ready when its V2 REST endpoint says
the model is ready and its gRPC port takes a connection. It is stopped by its process group, and any
process it left under it (tritonserver, Triton's Python stub) by PID. The object has what `run_load`
reads: `pid`, `http_url`, `grpc_target`.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.peers.envs import KSERVE, PYTRITON, PeerUnavailable
from slipway.child import stop_with_parent
from slipway.local_server import LoopbackServer
from slipway.ports import LOOPBACK
from slipway.server_process import stop_process_group

HERE = Path(__file__).resolve().parent
SCRIPTS = {KSERVE: HERE / "kserve_server.py", PYTRITON: HERE / "pytriton_server.py"}
READY_TIMEOUT_S = 180.0  # PyTriton starts tritonserver, then a Python stub per model: tens of seconds on 2 busy cores
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b[:(].*")


@dataclass
class PeerServer(LoopbackServer):
    """One peer serving `onnx_file` as `model`; use it as a context manager (raises `PeerUnavailable`)."""

    peer: str
    python: Path
    onnx_file: Path
    model: str
    ready_timeout_s: float = field(default=READY_TIMEOUT_S, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._workdir = Path(tempfile.mkdtemp(prefix=f"slipway-{self.peer}-"))
        self.log_path = self._workdir / "server.log"

    def command(self) -> list[str]:
        command = [
            str(self.python),
            str(SCRIPTS[self.peer]),
            "--onnx-file",
            str(self.onnx_file),
            "--served-name",
            self.model,
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
        ]
        if self.peer == PYTRITON:  # its workspace (a copy of tritonserver, the model store) goes with ours
            command += ["--metrics-port", str(self.metrics_port), "--workspace", str(self._workdir / "workspace")]
        return command

    def __enter__(self) -> PeerServer:
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                self.command(),
                cwd=self._workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=stop_with_parent,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise PeerUnavailable(
                    f"{self.peer} exited with code {self._process.returncode}: {self.failure_reason()} (log: {self.log_path})"
                )
            if self._model_ready() and self._grpc_listening():
                return
            time.sleep(0.5)
        raise PeerUnavailable(
            f"{self.peer} was not ready after {self.ready_timeout_s:.0f} s: {self.failure_reason()} (log: {self.log_path})"
        )

    def _model_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/models/{self.model}/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _grpc_listening(self) -> bool:
        try:
            socket.create_connection((LOOPBACK, self.grpc_port), timeout=1).close()
            return True
        except OSError:
            return False

    def failure_reason(self) -> str:
        """The last error line in the server's log (the first is often a harmless warning), else its last line."""
        lines = (
            [line.strip() for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
            if self.log_path.exists()
            else []
        )
        errors = [found.group(0) for line in lines if (found := _ERROR_LINE.search(line))]
        reason = errors[-1] if errors else (lines[-1] if lines else "no output")
        return reason[:300]

    def _stop(self) -> None:
        """SIGTERM the process group, then SIGKILL whatever it left under it (by PID); remove PyTriton's workspace."""
        import psutil

        process, self._process = self._process, None
        if process is None:
            return
        try:
            below = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            below = []
        stop_process_group(process)
        for child in below:
            try:
                child.wait(timeout=10)
            except psutil.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(self._workdir / "workspace", ignore_errors=True)  # PyTriton's: 20+ MB; the log stays

    def __exit__(self, *exc_info: object) -> None:
        crashed = self._process is not None and self._process.poll() is not None
        self._stop()
        if not crashed:
            shutil.rmtree(self._workdir, ignore_errors=True)
