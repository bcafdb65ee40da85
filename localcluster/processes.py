"""Start the control plane's processes in the background and stop them again by their PIDs.

Each process runs in its own session (a terminal's Ctrl-C after `make cluster` returns does
not reach it), writes its log to a file, and is recorded with its binary so that a PID the
system has since given to another program is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from slipway.child import stop_with_parent
from slipway.local_cluster import process_runs

STOP_GRACE_S = 3.0
KILL_WAIT_S = 30.0  # SIGKILL cannot be refused; a process in uninterruptible I/O may still take a while


@dataclass(frozen=True)
class Process:
    name: str
    pid: int
    binary: str
    log: str

    def as_dict(self) -> dict:
        return asdict(self)


def start(
    name: str, binary: Path, args: list[str], *, log_dir: Path, env: dict[str, str] | None = None, tied: bool = False
) -> Process:
    """Start `binary args` in its own session with its output in `log_dir/<name>.log`; `tied`: it is killed
    when this process dies (for tests: a killed test run leaves no cluster behind)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=log_dir,
            preexec_fn=partial(stop_with_parent, signal.SIGKILL) if tied else None,
        )
    return Process(name, child.pid, str(binary), str(log_path))


def running(process: Process) -> bool:
    """Whether `process.pid` is still alive and still runs `process.binary` (not a zombie, not a reused PID)."""
    return process_runs(process.pid, process.binary)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _ended(pid: int) -> bool:
    """Whether `pid` has left the process table or is a zombie. Not `running`: a process tearing down its memory
    already reads an empty command line, yet still holds its ports and files."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    if state in {"Z", "X"}:
        _reap(pid)
        return True
    return False


def _wait_ended(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _ended(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _ended(pid)


def stop(processes: list[Process], grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop each running process, last started first: SIGTERM, then SIGKILL after `grace_s`, each waited on until
    the process has ended (a bounded wait: a PID seen ending is never signalled again); the names stopped.

    One at a time, so that each finds what it depends on still there: an API server whose etcd
    went first waits out its own shutdown (over 10 s), one stopped before etcd takes a second.
    """
    stopped = []
    for process in reversed(processes):
        if not running(process):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        if not _wait_ended(process.pid, grace_s) and running(process):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            _wait_ended(process.pid, KILL_WAIT_S)
        stopped.append(process.name)
    return stopped


def last_lines(process: Process, count: int = 3) -> str:
    """The end of a process's log, for an error message."""
    try:
        lines = Path(process.log).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip()[:300] for line in lines[-count:])
