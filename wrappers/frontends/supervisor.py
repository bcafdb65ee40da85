"""Start a model's session host and its N front ends, watch them, and stop them all by PID.

`python -m wrappers.frontends FOLDER` serves an artifact folder whose settings say `frontends: N`: one
session host (`host`, which owns the session) and N front ends (`python -m wrappers.launch --front-end`:
Slipway's launcher on ports shared with SO_REUSEPORT), each told where the host listens. MLServer's settings come from the environment
as for the launcher (`MLSERVER_*`). Where any of them exits unasked, the host crashed or a front end failed
to load, the others are stopped and the supervisor exits non-zero with one line naming which and why:
a front end never waits on a host that is gone (it stops itself too, `client`), and nothing is left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slipway import atomic
from slipway.child import stop_with_parent
from slipway.cli import ArgumentParser, UserError, exit_with
from slipway.drain import DrainSettingError, drain_seconds
from wrappers.frontends.client import HOST_SOCKET_ENV
from wrappers.frontends.host import HostError, read_model, serving_file
from wrappers.mlserver_compat.shared_ports import MULTIPROC_ENV

HOST_READY_TIMEOUT_S = 600.0  # a TensorRT engine build at the host's first start takes minutes
STOP_MARGIN_S = 5.0  # past a front end's drain (SLIPWAY_DRAIN_SECONDS), for it to exit, before it is killed
_POLL_S = 0.2
FAILURE_FILE = "failure.txt"


class SupervisorError(RuntimeError):
    """The server could not start or stopped unasked; the message names the process and why, in one line."""


def frontends_of(model_dir: Path) -> int:
    """The `frontends` setting of the artifact folder `model_dir` (1 for a folder of models: not supported there)."""
    if not (Path(model_dir) / "model-settings.json").is_file():
        return 1
    try:
        return read_model(Path(model_dir))[3].frontends
    except HostError:
        return 1  # the launcher refuses the folder in its own words


@dataclass
class _Child:
    role: str
    process: subprocess.Popen
    failure_file: Path

    def reason(self) -> str:
        try:
            said = self.failure_file.read_text().strip()
        except OSError:
            said = ""
        status = self.process.returncode
        how = f"was killed by signal {-status}" if status is not None and status < 0 else f"exited with status {status}"
        return f"{self.role} (pid {self.process.pid}) {how}" + (f": {said}" if said else "")


@dataclass
class Supervisor:
    """The host and front ends of one model folder; `run` serves until asked to stop or until one of them exits."""

    model_dir: Path
    frontends: int
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="slipway-frontends-")))
    children: list[_Child] = field(default_factory=list)
    asked_to_stop: bool = False
    drain_s: float = 20.0  # each front end's SLIPWAY_DRAIN_SECONDS (`slipway.drain`)

    @property
    def socket_path(self) -> Path:
        return self.workdir / "host.sock"

    def start(self) -> None:
        """The host, once its socket accepts, then every front end; SupervisorError (all stopped) where one fails."""
        metrics = self.workdir / "metrics"
        metrics.mkdir(exist_ok=True)
        env = dict(os.environ) | {HOST_SOCKET_ENV: str(self.socket_path), MULTIPROC_ENV: str(metrics)}
        host = self._spawn("session host", ["wrappers.frontends.host", str(self.model_dir), str(self.socket_path)], env)
        deadline = time.monotonic() + HOST_READY_TIMEOUT_S
        while not self.socket_path.exists():
            if host.process.poll() is not None or time.monotonic() > deadline or self.asked_to_stop:
                self.stop()
                if self.asked_to_stop:
                    return
                raise SupervisorError(
                    host.reason()
                    if host.process.returncode is not None
                    else f"the session host was not ready after {HOST_READY_TIMEOUT_S:.0f} s"
                )
            time.sleep(_POLL_S)
        for index in range(self.frontends):
            self._spawn(f"front end {index + 1}", ["wrappers.launch", str(self.model_dir), "--front-end"], env)
        deadline = time.monotonic() + HOST_READY_TIMEOUT_S
        while self._serving() < self.frontends and not self.asked_to_stop:  # every one loaded, or one failed
            if time.monotonic() > deadline:
                self.stop()
                raise SupervisorError(
                    f"{self._serving()} of {self.frontends} front ends served after {HOST_READY_TIMEOUT_S:.0f} s"
                )
            for child in self.children:
                if child.process.poll() is not None:
                    self.stop()
                    raise SupervisorError(child.reason())
            time.sleep(_POLL_S)
        print(f"serving {self.model_dir} with a session host and {self.frontends} front ends", flush=True)

    def _serving(self) -> int:
        try:
            return int(serving_file(self.socket_path).read_text())
        except (OSError, ValueError):
            return 0

    def _spawn(self, role: str, module_and_args: list[str], env: dict[str, str]) -> _Child:
        failure_file = self.workdir / f"{role.replace(' ', '-')}-{FAILURE_FILE}"
        command = [sys.executable, "-m", *module_and_args, "--failure-file", str(failure_file)]
        process = subprocess.Popen(command, env=env, preexec_fn=stop_with_parent)
        child = _Child(role, process, failure_file)
        self.children.append(child)
        return child

    def wait(self) -> None:
        """Until asked to stop (returns) or until a child exits unasked (all stopped, SupervisorError)."""
        while not self.asked_to_stop:
            for child in self.children:
                if child.process.poll() is not None:
                    self.stop()
                    raise SupervisorError(child.reason())
            time.sleep(_POLL_S)
        self.stop()

    def ask_to_stop(self, *_: object) -> None:
        self.asked_to_stop = True

    def stop(self) -> None:
        """SIGTERM the front ends by PID and wait for them, then the host (a front end that loses its host while it
        drains would stop itself a second time); SIGKILL what has not gone STOP_MARGIN_S after its drain."""
        front_ends, host = self.children[1:], self.children[:1]
        for group in (front_ends, host):
            for child in group:
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.drain_s + STOP_MARGIN_S
            for child in group:
                try:
                    child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.process.kill()
                    child.process.wait()

    def clean_up(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m wrappers.frontends", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="an artifact folder whose settings say frontends: N")
    parser.add_argument("--failure-file", type=Path, help="where to write the one-line cause too, should it fail")
    parser.add_argument("--ready-file", type=Path, help="a file written once every front end serves (the server is ready)")
    args = parser.parse_args(argv)
    count = frontends_of(args.folder)
    if count < 2:
        raise UserError(
            f"{args.folder} is not an artifact folder whose model-settings.json sets parameters.extra."
            "frontends above 1; serve it with `python -m wrappers.launch` instead"
        )
    try:
        drain_s = drain_seconds()
    except DrainSettingError as err:
        raise UserError(str(err)) from None
    supervisor = Supervisor(args.folder.resolve(), count, drain_s=drain_s)
    previous = {signum: signal.signal(signum, supervisor.ask_to_stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        supervisor.start()
        if args.ready_file is not None and not supervisor.asked_to_stop:  # one front end ready is not the server
            atomic.write_text(args.ready_file, f"{count} front ends serve\n")
        supervisor.wait()
    except SupervisorError as err:
        if args.failure_file is not None:
            atomic.write_text(args.failure_file, f"{err}\n")
        raise UserError(str(err)) from None
    finally:
        supervisor.stop()
        supervisor.clean_up()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


if __name__ == "__main__":
    exit_with(main)
