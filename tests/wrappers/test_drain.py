"""A stopped server drains (issue 47): on SIGTERM the launcher stops accepting, answers the requests it has accepted,
and exits 0, within SLIPWAY_DRAIN_SECONDS however long a request would take. Real servers on loopback, each
request held in flight by the client itself (its body sent but for its last bytes), so nothing depends on timing."""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import time

import grpc
import numpy as np
import onnx
import pytest
from tritonclient.grpc import service_pb2

from slipway import drain
from slipway.cli import UserError
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK
from tests.graphs import identity_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.loopback import wait_until_read
from tests.wrappers.v2 import GrpcClient, raw_output, raw_request
from wrappers.limits.grpc_drain import REFUSAL

pytestmark = pytest.mark.slow
BODY = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[0.5,1.5,2.5]}]}'
HELD_BACK = 5  # bytes of the body the client keeps until the server has been told to stop


@pytest.fixture
def repository(tmp_path):
    model_folder(tmp_path / "models", "echo", identity_graph(tmp_path / "echo.onnx", onnx.TensorProto.FLOAT))
    return tmp_path / "models"


def _in_flight(server: LocalServer) -> http.client.HTTPConnection:
    """A request whose headers and all but the last HELD_BACK bytes of its body the server has."""
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=60)
    connection.putrequest("POST", "/v2/models/echo/infer")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(len(BODY)))
    connection.endheaders(BODY[:-HELD_BACK])
    return connection


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=5):
            return True
    except OSError:
        return False


def _stopped(server: LocalServer, seconds: float = 60) -> int | None:
    try:
        return server._process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def test_on_sigterm_the_request_in_flight_is_answered_no_new_one_is_accepted_and_it_exits_0(repository):
    with LocalServer(repository, extra_env={drain.DRAIN_ENV: "60"}) as server:
        held = _in_flight(server)
        wait_until_read(server.http_port)  # the server has the request, but for its last bytes
        os.kill(server.pid, signal.SIGTERM)
        for _ in range(200):  # the listener closes: no connection is accepted any more (bounded: 200 tries)
            if not _accepts(server.http_port):
                break
            time.sleep(0.05)
        assert not _accepts(server.http_port), "still accepting connections after SIGTERM"
        assert server._process.poll() is None  # still answering the one in flight
        held.send(BODY[-HELD_BACK:])
        answer = held.getresponse()
        assert answer.status == 200 and json.loads(answer.read())["outputs"][0]["data"] == [0.5, 1.5, 2.5]
        held.close()
        assert _stopped(server) == 0, server.log_path.read_text()[-2000:]
        assert "accepting no more requests, answering those in flight for at most 60 s" in server.log_path.read_text()


def _answer(sock: socket.socket) -> http.client.HTTPResponse:
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    return answer


def test_a_request_begun_on_a_kept_alive_connection_as_the_drain_starts_is_answered_with_connection_close(repository):
    """The keep-alive race: the connection was idle when the drain began, but its client had sent part of its next
    request. uvicorn closed such a connection at once, resetting it under the request (lost)."""
    head = b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: slipway\r\nContent-Type: application/json\r\n"
    rest = b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    with LocalServer(repository, extra_env={drain.DRAIN_ENV: "60"}) as server:
        with socket.create_connection((LOOPBACK, server.http_port), timeout=60) as sock:
            sock.sendall(head + rest)
            first = _answer(sock)
            assert first.status == 200 and not first.will_close
            first.read()
            sock.sendall(head)  # the next request on the kept-alive connection, its headers not yet whole
            wait_until_read(server.http_port)
            os.kill(server.pid, signal.SIGTERM)
            for _ in range(200):  # bounded: the drain has begun once no connection is accepted
                if not _accepts(server.http_port):
                    break
                time.sleep(0.05)
            sock.sendall(rest)
            answer = _answer(sock)
            assert answer.status == 200 and json.loads(answer.read())["outputs"][0]["data"] == [0.5, 1.5, 2.5]
            assert answer.getheader("connection") == "close"  # the client knows to open its next one elsewhere
        assert _stopped(server) == 0, server.log_path.read_text()[-2000:]


STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def _calls_taken(server: LocalServer) -> int:
    """How many ModelStreamInfer calls have passed the server's interceptors to their handler (with MLSERVER_DEBUG,
    MLServer's logging interceptor logs each call's method as it passes)."""
    return server.log_path.read_text().count(STREAM)


def test_on_sigterm_a_grpc_call_taken_is_answered_and_a_new_one_is_refused_unavailable(repository):
    """grpc's own stop cancels (CANCELLED) the calls it has taken but not handed to a handler, and those arriving until
    the clients read its GOAWAY: the drain refuses new calls UNAVAILABLE first, which a client may send again, and
    answers the ones taken (here a stream opened before the signal, its request sent after it)."""
    x = np.array([0.5, 1.5, 2.5], np.float32)
    request = raw_request("echo", {"x": ("FP32", [3], x.tobytes())})
    with LocalServer(repository, extra_env={drain.DRAIN_ENV: "60", "MLSERVER_DEBUG": "true"}) as server:
        client = GrpcClient(server.grpc_target)
        held: queue.Queue = queue.Queue()
        stream = client.channel.stream_stream(  # MLServer's stream answers ModelInferResponse, not Triton's wrapper
            STREAM,
            request_serializer=service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )
        answers = stream(iter(held.get, None), timeout=60)
        for _ in range(400):  # bounded: until the handler has the call (it waits for the stream's first request)
            if _calls_taken(server):
                break
            time.sleep(0.05)
        assert _calls_taken(server) == 1
        os.kill(server.pid, signal.SIGTERM)
        late = GrpcClient(server.grpc_target)
        for _ in range(200):  # bounded: a call sent in the instant before the signal is handled is still answered
            try:
                late.infer(request)
            except grpc.RpcError as refused:
                assert refused.code() == grpc.StatusCode.UNAVAILABLE and refused.details() == REFUSAL, refused
                break
            time.sleep(0.01)
        else:
            pytest.fail("no call refused after SIGTERM")
        late.close()
        held.put(request)
        held.put(None)
        answered = list(answers)
        assert len(answered) == 1 and raw_output(answered[0]).tolist() == [0.5, 1.5, 2.5]
        client.close()
        assert _stopped(server) == 0, server.log_path.read_text()[-2000:]


def test_a_request_that_never_ends_holds_the_stop_no_longer_than_the_drain(repository):
    env = {drain.DRAIN_ENV: "1", "SLIPWAY_BODY_IDLE_TIMEOUT_S": "600"}  # not ended by the body's idle timeout
    with LocalServer(repository, extra_env=env) as server:
        held = _in_flight(server)  # its last bytes never come
        wait_until_read(server.http_port)
        os.kill(server.pid, signal.SIGTERM)
        assert _stopped(server, 30) == 0, "the server did not exit on its own after its drain"  # MLServer's waited on
        held.close()


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf", "nan"])
def test_a_drain_that_is_not_a_positive_number_of_seconds_is_refused_naming_the_variable(value):
    with pytest.raises(drain.DrainSettingError, match=f"SLIPWAY_DRAIN_SECONDS='{value}' is not a number of seconds over 0"):
        drain.drain_seconds({drain.DRAIN_ENV: value})
    assert drain.drain_seconds({}) == drain.DEFAULT_DRAIN_S and drain.drain_seconds({drain.DRAIN_ENV: "2.5"}) == 2.5


def test_the_supervisor_of_several_front_ends_reads_the_drain_and_refuses_a_wrong_one(tmp_path, monkeypatch):
    """It waits out the front ends' drain (and a margin) before it kills one: a wrong value stops it first."""
    from wrappers.frontends import supervisor

    folder = model_folder(
        tmp_path, "echo", identity_graph(tmp_path / "echo.onnx", onnx.TensorProto.FLOAT), extra={"frontends": 2}
    )
    monkeypatch.setenv(drain.DRAIN_ENV, "soon")
    with pytest.raises(UserError, match="SLIPWAY_DRAIN_SECONDS='soon' is not a number of seconds over 0"):
        supervisor.main([str(folder)])
