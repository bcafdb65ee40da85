"""`python -m wrappers serve` (`make serve`) as a user runs it: a real MLServer in the foreground, from the launcher.

MLServer itself exits 0 when a model fails to load; the command must not, nor hide why a server stopped (the
launcher's own one line, not read from a log). Ctrl-C and SIGTERM stop it cleanly, killing the command takes the
server with it, and a folder of artifact folders serves every model in it over REST and gRPC.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK, free_port
from tests.graphs import WEIGHT, matmul_graph, scalar_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import GrpcClient, json_input, post, raw_output, raw_request

pytestmark = pytest.mark.slow
WAIT_S = 120


def serve(folder, http_port: int | None = None, grpc_port: int | None = None) -> tuple[subprocess.Popen, int]:
    http_port = http_port or free_port()
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port or free_port()), "--metrics-port", str(free_port())]
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
    assert err.strip() == (
        "error: the server stopped: model scalar failed to load: wrappers.runtime.ModelLoadError: "
        f"model scalar: refusing to load: artifact {model} was modified: model.onnx does not match "
        "its sha256 in manifest.json"
    ), err
    assert "model scalar failed to load; stopping the server" in out and "Traceback" in out  # the log, whole


def test_a_port_in_use_ends_the_command_with_one_line_naming_it(model):
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        process, _ = serve(model, http_port=port)
        out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 2, (out, err)
    assert err.strip() == (
        f"error: the server stopped: cannot serve HTTP on ('{LOOPBACK}', {port}): address already "
        "in use; free the port or set MLSERVER_HTTP_PORT to another"
    ), err


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


def test_a_folder_of_artifact_folders_serves_each_model_over_rest_and_grpc(tmp_path):
    """Issue 31: two artifact folders side by side, each with its own settings, in one server from the launcher."""
    repository = tmp_path / "repository"
    model_folder(repository, "scalar", scalar_graph(tmp_path / "scalar.onnx"))
    model_folder(repository, "matmul", matmul_graph(tmp_path / "matmul.onnx"), extra={"max_batch_rows": 4})
    grpc_port = free_port()
    process, http_port = serve(repository, grpc_port=grpc_port)
    client = GrpcClient(f"{LOOPBACK}:{grpc_port}")
    try:
        wait_until(lambda: all(_ready(http_port, name) for name in ("scalar", "matmul")), "ready")
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        status, body = post(f"http://{LOOPBACK}:{http_port}/v2/models/matmul/infer", {"inputs": [json_input("x", x)]})
        assert status == 200, body
        np.testing.assert_allclose(np.asarray(body["outputs"][0]["data"]).reshape(2, 3), x @ WEIGHT, rtol=1e-6)
        answer = client.infer(raw_request("matmul", {"x": ("FP32", [2, 4], x.tobytes())}))
        np.testing.assert_allclose(raw_output(answer).reshape(2, 3), x @ WEIGHT, rtol=1e-6)
        scalar = np.asarray(2.5, dtype=np.float32)
        status, body = post(
            f"http://{LOOPBACK}:{http_port}/v2/models/scalar/infer",
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [], "data": [2.5]}]},
        )
        assert status == 200 and body["outputs"][0]["data"] == [2.5], body
        answer = client.infer(raw_request("scalar", {"x": ("FP32", [], scalar.tobytes())}))
        assert raw_output(answer).tolist() == 2.5
    finally:
        client.close()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, err
    # the launcher handed MLServer's REST app to the runtime: the fast infer route went in without a heap walk
    assert "answered without FastAPI's per-request work" in out


def _ready(http_port: int, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{http_port}/v2/models/{model}/ready", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False
