"""`python -m loadtest` against real servers on loopback that misbehave: silent, slow, trickling, not V2.

Each must end in one error line and a non-zero exit within its timeouts, leaving no Locust
process behind (looked up by PID in /proc, by the run's own output folder in its command line).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from loadtest.cli import main
from slipway.cli import EXIT_USER_ERROR, run
from slipway.paths import PROJECT_ROOT
from tests.conftest import http_server, json_http_server, run_module, send_body

METADATA = {
    "name": "mm",
    "platform": "",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
}
V2_ANSWER = {"model_name": "mm", "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [0, 0, 1]}]}


def rest_server(post: Callable[[http.server.BaseHTTPRequestHandler], None]):
    """A loopback server describing METADATA on GET and answering POST with `post(handler)` (a context manager
    yielding its URL)."""

    def read_then_post(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers["Content-Length"]))
        post(handler)

    return http_server(get=lambda handler: send_body(handler, json.dumps(METADATA).encode()), post=read_then_post)


@contextlib.contextmanager
def grpc_server(infer: Callable[[grpc.ServicerContext], service_pb2.ModelInferResponse]) -> Iterator[str]:
    """A loopback V2 gRPC server describing METADATA and answering ModelInfer with `infer(context)`; yields host:port."""

    class Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ModelMetadata(self, request, context):  # noqa: N802 (gRPC's naming)
            tensor = service_pb2.ModelMetadataResponse.TensorMetadata
            return service_pb2.ModelMetadataResponse(
                name="mm",
                inputs=[tensor(name="x", datatype="FP32", shape=[-1, 4])],
                outputs=[tensor(name="y", datatype="FP32", shape=[-1, 3])],
            )

        def ModelInfer(self, request, context):  # noqa: N802
            return infer(context)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.fixture
def never():
    """An event that handlers wait on instead of answering; set at the end so their threads finish."""
    event = threading.Event()
    yield event
    event.set()


@contextlib.contextmanager
def socket_server(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """A raw loopback TCP server handing each connection to `serve` in its own thread; yields http://host:port."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = listener.accept()
                threading.Thread(target=_serve_quietly, args=(serve, connection), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def _serve_quietly(serve, connection: socket.socket) -> None:
    with connection, contextlib.suppress(OSError):  # the client hanging up ends the connection
        serve(connection)


def locust_pids(out_dir: str) -> list[int]:
    """PIDs of the live Locust processes writing to `out_dir` (their command line names its locust.html)."""
    marker, pids = str(Path(out_dir) / "locust.html"), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    pids += [] if status == "Z" else [int(entry.name)]
    return pids


def _one_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == EXIT_USER_ERROR, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def _load(host: str, tmp_path: Path, env: dict, *args: str, timeout: float = 60) -> tuple[str, float]:
    """Run `loadtest run` for 2 s; its one error line and how long it took, after checking nothing is left running."""
    out_dir = str(tmp_path / "locust")
    started = time.monotonic()
    result = run_module(
        "loadtest",
        "run",
        "--host",
        host,
        "--model",
        "mm",
        "--duration",
        "2",
        "--out-dir",
        out_dir,
        *args,
        env=env,
        check=False,
        timeout=timeout,
    )
    took = time.monotonic() - started
    assert locust_pids(out_dir) == []
    return _one_error(result), took


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_a_server_that_never_answers_is_named_and_its_locust_workers_are_gone_when_the_run_ends(
    protocol, never, reports_env, tmp_path
):
    def hang(*_):
        never.wait(60)
        return service_pb2.ModelInferResponse()

    server = rest_server(hang) if protocol == "rest" else grpc_server(hang)
    with server as host:
        error, took = _load(host, tmp_path, reports_env, "--protocol", protocol, "--processes", "2")
    assert "the server completed no request in the whole run" in error and took < 30


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_answers_that_are_not_v2_inference_count_as_failures(protocol, reports_env, tmp_path):
    if protocol == "rest":
        server = rest_server(lambda handler: send_body(handler, b"<html>welcome</html>", "text/html"))
    else:
        server = grpc_server(lambda context: service_pb2.ModelInferResponse(model_name="mm"))
    with server as host:
        error, _ = _load(host, tmp_path, reports_env, "--protocol", protocol)
    assert "the server answered none of the" in error and "without V2 outputs" in error, error


@pytest.mark.slow
def test_v2_answers_still_pass(reports_env, tmp_path):
    with rest_server(lambda handler: send_body(handler, json.dumps(V2_ANSWER).encode())) as host:
        result = run_module(
            "loadtest",
            "run",
            "--host",
            host,
            "--model",
            "mm",
            "--duration",
            "2",
            "--max-error-rate",
            "0",
            "--out-dir",
            str(tmp_path / "locust"),
            env=reports_env,
            check=False,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr


def _trickle(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while True:
        connection.sendall(b" ")
        time.sleep(0.5)


def _flood(connection: socket.socket) -> None:
    connection.recv(65536)
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
    while True:
        connection.sendall(b"0," * 65536)


@pytest.mark.slow
@pytest.mark.parametrize("serve", [_trickle, _flood], ids=["trickling", "endless"])
def test_metadata_that_never_ends_is_given_up_on_in_its_timeout(serve, reports_env, tmp_path):
    """urllib's timeout is per socket read: a server sending a byte every half second would hold it for ever."""
    from loadtest.payloads import METADATA_TIMEOUT_S

    with socket_server(serve) as host:
        error, took = _load(host, tmp_path, reports_env, timeout=METADATA_TIMEOUT_S + 20)
    assert "/v2/models/mm" in error and took < METADATA_TIMEOUT_S + 8, error


@pytest.mark.parametrize(
    "metadata, args, message",
    [
        ("hello", [], "did not answer V2 metadata"),
        ({"inputs": [{"name": "x"}]}, [], "did not answer V2 metadata"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": "ab"}]}, [], "did not answer V2 metadata"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 10**12]}]}, [], "values per request"),
        (METADATA, ["--batch-size", str(10**11)], "values per request"),
    ],
)
def test_metadata_that_is_not_v2_or_too_big_to_send_is_one_line(capsys, tmp_path, metadata, args, message):
    with json_http_server(lambda path: metadata) as host:
        assert run(main, ["run", "--host", host, "--model", "mm", *args, "--out-dir", str(tmp_path / "o")]) == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


@pytest.mark.slow
def test_a_terminated_run_stops_its_locust(never, reports_env, tmp_path):
    """SIGTERM (a cancelled CI job, `timeout`) must stop Locust by PID as Ctrl-C does, not orphan it."""
    out_dir = str(tmp_path / "locust")
    with rest_server(lambda handler: send_body(handler, json.dumps(V2_ANSWER).encode())) as host:
        command = [
            sys.executable,
            "-m",
            "loadtest",
            "run",
            "--host",
            host,
            "--model",
            "mm",
            "--duration",
            "30",
            "--out-dir",
            out_dir,
        ]
        process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env={**os.environ, **reports_env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 15
            while not locust_pids(out_dir) and time.monotonic() < deadline:
                time.sleep(0.2)
            locust = locust_pids(out_dir)
            assert locust, "locust never started"
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
        finally:
            process.kill()
            process.wait()
        gone = locust_pids(out_dir)
        for pid in gone:  # the test's own clean-up before it fails: never leave a run behind
            os.kill(pid, signal.SIGKILL)
    assert process.returncode != 0 and gone == [], process.stderr.read()


@pytest.fixture
def example_dir(tmp_path) -> Path:
    np.savez(
        tmp_path / "input-example.npz", **{"input:x": np.zeros((2, 4), np.float32), "output:y": np.zeros((2, 3), np.float32)}
    )
    return tmp_path


@pytest.mark.slow
def test_smoke_checks_give_up_on_a_server_that_never_answers_or_fails(never, example_dir):
    from loadtest.smoke import SmokeError, check_grpc, check_http

    def hang(*_):
        never.wait(60)
        return service_pb2.ModelInferResponse()

    for checks in ((rest_server(hang), check_http), (grpc_server(hang), check_grpc)):
        server, check = checks
        with server as host, pytest.raises(SmokeError, match="did not answer") as caught:
            started = time.monotonic()
            check(host, "mm", example_dir, timeout_s=2)
        assert time.monotonic() - started < 10 and "\n" not in str(caught.value)

    def unavailable(context):
        context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    with grpc_server(unavailable) as host, pytest.raises(SmokeError, match="UNAVAILABLE|going away"):
        check_grpc(host, "mm", example_dir)
    with rest_server(lambda handler: send_body(handler, b"<html>", "text/html")) as host, pytest.raises(SmokeError):
        check_http(host, "mm", example_dir)
