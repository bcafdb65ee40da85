"""`python -m wrappers serve` (`make serve`) as a user runs it: a real MLServer in the foreground.

MLServer itself exits 0 when a model fails to load; the command must not, nor hide why a server stopped.
Ctrl-C and SIGTERM stop it cleanly, and killing the command takes the server with it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from slipway.paths import PROJECT_ROOT
from tests.graphs import scalar_graph
from tests.wrappers.folders import model_folder
from wrappers.server import LOOPBACK, free_port

pytestmark = pytest.mark.slow
WAIT_S = 120


def serve(folder, http_port: int | None = None) -> tuple[subprocess.Popen, int]:
    http_port = http_port or free_port()
    ports = ["--http-port", str(http_port), "--grpc-port", str(free_port()), "--metrics-port", str(free_port())]
    command = [sys.executable, "-m", "wrappers", "serve", "--model-dir", str(folder), "--host", LOOPBACK, *ports]
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, http_port


def answers(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{http_port}/v2/health/live", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not {what} after {WAIT_S} s"
        time.sleep(0.2)


@pytest.fixture
def model(tmp_path):
    return model_folder(tmp_path / "models", "scalar", scalar_graph(tmp_path / "scalar.onnx"))


def test_a_model_that_fails_to_load_ends_the_command_with_one_line_naming_why(model):
    (model / "model.onnx").write_bytes(b"not the published graph")
    process, _ = serve(model)
    out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 2, (out, err)
    assert err.strip() == (f"error: MLServer stopped by itself (exit status 0): slipway.artifact.ArtifactError: artifact "
                           f"{model} was modified: model.onnx does not match its sha256 in manifest.json"), err
    assert "Some of the models failed to load" in out  # MLServer's own log still reaches the user


def test_a_port_in_use_ends_the_command_with_one_line_naming_it(model):
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        process, _ = serve(model, http_port=port)
        out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: MLServer stopped by itself (exit status ")
    assert f"('{LOOPBACK}', {port}): address already in use" in err, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_the_server_cleanly_with_status_0(model, signum):
    process, http_port = serve(model)
    try:
        wait_until(lambda: answers(http_port), "serving")
    finally:
        process.send_signal(signum)  # the command's PID alone, as `kill` sends it: it must reach the server
    out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, (out, err)
    assert "Traceback" not in out + err and not answers(http_port)


def test_killing_the_command_takes_the_server_with_it(model):
    process, http_port = serve(model)
    try:
        wait_until(lambda: answers(http_port), "serving")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=WAIT_S)
    wait_until(lambda: not answers(http_port), "stopped")
