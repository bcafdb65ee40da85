"""No connection holds the server for nothing (issue 47): headers past their size or count get 431, headers or a
body that stall get 408, and each such connection is closed while the server keeps answering everyone else. The
timeouts are set short here (2 s); the bounds the tests wait for are generous, so a busy machine passes too."""

from __future__ import annotations

import json
import socket
import time

import onnx
import pytest

from slipway.local_server import LocalServer, ServerError
from slipway.ports import LOOPBACK
from tests.graphs import identity_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import post

pytestmark = pytest.mark.slow
TIMEOUT_S = 2
WAIT_S = 60  # how long a test waits for the server to close a stalled connection: many times TIMEOUT_S
BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [2.5]}]}


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    model_folder(root, "echo", identity_graph(tmp_path_factory.mktemp("graphs") / "echo.onnx", onnx.TensorProto.FLOAT))
    return root


@pytest.fixture(scope="module")
def server(repository):
    env = {"SLIPWAY_HEADER_TIMEOUT_S": str(TIMEOUT_S), "SLIPWAY_BODY_IDLE_TIMEOUT_S": str(TIMEOUT_S)}
    with LocalServer(repository, extra_env=env) as running:
        yield running


def _connect(server) -> socket.socket:
    return socket.create_connection((LOOPBACK, server.http_port), timeout=WAIT_S)


def _answer(sock: socket.socket) -> tuple[int, dict]:
    """The status and JSON body the server sent, read until it closes the connection (socket.timeout, after WAIT_S,
    fails the test: the connection was held)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _still_serving(server) -> None:
    status, answer = post(f"{server.http_url}/v2/models/echo/infer", BODY)
    assert status == 200 and answer["outputs"][0]["data"] == [2.5], answer


@pytest.mark.parametrize(
    ("headers", "refusal"),
    [
        ({"X-Big": "a" * (200 << 10)}, "the request line and headers are over 65536 bytes"),
        ({f"X-{number}": "1" for number in range(150)}, "the request has over 100 headers (SLIPWAY_MAX_HEADERS)"),
    ],
    ids=["one-huge-header", "too-many-headers"],
)
def test_headers_past_their_limits_get_431_and_the_connection_closes(server, headers, refusal):
    with _connect(server) as sock:
        lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        try:
            sock.sendall(f"GET /v2/health/ready HTTP/1.1\r\nHost: slipway\r\n{lines}\r\n".encode())
        except ConnectionResetError:  # answered and closed while the headers were still going out
            pass
        status, answer = _answer(sock)
    assert status == 431 and refusal in answer["error"], answer
    _still_serving(server)


def test_trickling_and_silent_connections_are_answered_408_and_closed(server):
    """Slowloris: connections that send a header byte now and then, and ones that send nothing, all closed."""
    trickling = [_connect(server) for _ in range(10)]
    silent = [_connect(server) for _ in range(5)]
    for sock in trickling:
        sock.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: slipway\r\n")
    deadline = time.monotonic() + WAIT_S
    open_ones = list(trickling)
    while open_ones and time.monotonic() < deadline:
        for sock in list(open_ones):
            try:
                sock.sendall(b"X")  # one more byte of a header that never ends
            except (BrokenPipeError, ConnectionResetError):
                open_ones.remove(sock)
        _still_serving(server)  # everyone else is answered meanwhile
        time.sleep(0.5)
    assert not open_ones, f"{len(open_ones)} trickling connections still held after {WAIT_S} s"
    for sock in silent:
        status, answer = _answer(sock)
        assert status == 408 and f"were not whole within {TIMEOUT_S} s (SLIPWAY_HEADER_TIMEOUT_S)" in answer["error"]
        sock.close()
    for sock in trickling:
        sock.close()


def test_a_body_that_stops_coming_gets_408_and_the_connection_closes(server):
    with _connect(server) as sock:
        sock.sendall(
            b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: slipway\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"inputs": ['
        )
        status, answer = _answer(sock)
    assert status == 408 and f"sent nothing for {TIMEOUT_S} s (SLIPWAY_BODY_IDLE_TIMEOUT_S)" in answer["error"], answer
    _still_serving(server)


def test_a_kept_alive_connection_s_next_headers_are_timed_from_their_own_start(repository):
    """The deadline moves with each request rather than a timer per request: after a body that paused past the header
    timeout (a body's pauses may be long here), the connection's next request still gets the header timeout, not
    whatever was left of the body's."""
    env = {"SLIPWAY_HEADER_TIMEOUT_S": str(TIMEOUT_S), "SLIPWAY_BODY_IDLE_TIMEOUT_S": "3600"}
    body = json.dumps(BODY).encode()
    head = f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: slipway\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with LocalServer(repository, extra_env=env) as server, _connect(server) as sock:
        sock.sendall(head + body[:5])
        time.sleep(TIMEOUT_S + 1)  # past the header timeout, within the body's: the request goes on
        sock.sendall(body[5:])
        answered = b""
        while b'"data":[2.5]' not in answered:
            answered += sock.recv(65536)
        assert answered.startswith(b"HTTP/1.1 200"), answered
        sock.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\n")  # the next request's headers, never finished
        status, answer = _answer(sock)  # within WAIT_S, not the body's hour
    assert status == 408 and f"were not whole within {TIMEOUT_S} s (SLIPWAY_HEADER_TIMEOUT_S)" in answer["error"]


def test_a_limit_that_is_not_a_count_stops_the_server_in_one_line(repository):
    with pytest.raises(ServerError, match=r"SLIPWAY_MAX_HEADERS='lots' is not a whole number of at least 1; unset it"):
        LocalServer(repository, extra_env={"SLIPWAY_MAX_HEADERS": "lots"}, ready_timeout_s=60).start()
