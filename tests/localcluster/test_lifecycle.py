"""`make cluster` refuses what it cannot do in one line, and never leaves a process behind: not when a component
fails half way, not on Ctrl-C, not after `cluster down`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module

pytestmark = pytest.mark.slow


def _up(folder: Path, port: int, env: dict | None = None, check: bool = False):
    return run_module(
        "localcluster",
        "up",
        "--dir",
        str(folder),
        "--port",
        str(port),
        env={"COLUMNS": "400", **(env or {})},
        check=check,
        timeout=300,
    )


def _one_line(result) -> str:
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _pids(folder: Path) -> list[int]:
    state = folder / "state.json"
    return [process["pid"] for process in json.loads(state.read_text())["processes"]] if state.exists() else []


def _gone(pid: int, started: str | None = None) -> bool:
    """Whether `pid` has ended: no process, a zombie, or (where `started`, its start time, is given) another process
    under the same PID (a busy machine reuses PIDs quickly: pid_max is often 32768)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] == "Z" or (started is not None and fields[19] != started)


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_without_go_it_says_how_to_get_it(tmp_path):
    result = _up(tmp_path / "state", 1, env={"PATH": "/usr/bin:/bin"})
    assert "`go` is not on PATH" in _one_line(result) and not (tmp_path / "state").exists()


def test_a_busy_port_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line(_up(tmp_path / "state", port))
    assert f"port {port} on 127.0.0.1 is in use" in line and "CLUSTER_PORT" in line


def test_a_component_failing_half_way_stops_every_process_started_before_it(tmp_path):
    from localcluster.build import build_all
    from slipway.ports import free_port

    built = build_all()
    cache = tmp_path / "cache"
    cache.mkdir()
    for name, folder in built.items():
        if name == "seldon-operator":  # the last to start: a copy whose binary fails as a broken build would
            shutil.copytree(folder, cache / folder.name)
            broken = cache / folder.name / "bin" / "seldon-operator"
            broken.write_text("#!/bin/sh\necho 'unable to start manager: no webhook certificate' >&2\nexit 1\n")
            broken.chmod(0o755)
        else:
            (cache / folder.name).symlink_to(folder)
    state = tmp_path / "state"
    line = _one_line(_up(state, free_port(), env={"SLIPWAY_CLUSTER_CACHE": str(cache)}))
    assert "seldon-operator exited while starting: unable to start manager: no webhook certificate" in line
    assert (
        "stopped what had started (metrics-server, kwok, kube-scheduler, kube-controller-manager, kube-apiserver, etcd)" in line
    )
    pids = _pids(state)
    assert pids == [] or all(_gone(pid) for pid in pids)


def test_ctrl_c_while_starting_stops_what_had_started(tmp_path):
    from slipway.ports import free_port

    state = tmp_path / "state"
    command = subprocess.Popen(
        [sys.executable, "-m", "localcluster", "up", "--dir", str(state), "--port", str(free_port())],
        cwd=PROJECT_ROOT,
        stderr=subprocess.PIPE,
        text=True,
        # a terminal's Ctrl-C even where this test runs in the background (SIGINT ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while len(_pids(state)) < 2 and time.monotonic() < deadline and command.poll() is None:
            time.sleep(0.1)
        started = json.loads((state / "state.json").read_text())["processes"]
        assert len(started) >= 2, "the cluster had not started two processes"
        command.send_signal(signal.SIGINT)
        assert command.wait(timeout=60) == 130
        assert all(_gone(process["pid"]) for process in started)
    finally:
        command.kill()
        run_module("localcluster", "down", "--dir", str(state))  # whatever a failure above left running


def test_down_stops_everything_and_removes_the_state(tmp_path):
    from slipway.ports import free_port

    state = tmp_path / "state"
    result = _up(state, free_port(), check=True)
    assert "local cluster ready" in result.stderr and result.stdout.strip() == str(state / "kubeconfig")
    assert "namespace slipway holds Secret slipway-model-storage for s3://slipway-models" in result.stderr
    pids = _pids(state)
    assert len(pids) == 8 and not any(_gone(pid) for pid in pids)
    started = {pid: _start_time(pid) for pid in pids}
    status = run_module("localcluster", "status", "--dir", str(state))
    assert status.stderr.count("running") == 8
    down = run_module("localcluster", "down", "--dir", str(state), env={"COLUMNS": "400"})
    assert "stopped versitygw, seldon-operator, metrics-server" in down.stderr and not state.exists()
    assert all(_gone(pid, started[pid]) for pid in pids)
    assert "nothing to stop" in run_module("localcluster", "down", "--dir", str(state)).stderr
    assert os.listdir(tmp_path) == []
