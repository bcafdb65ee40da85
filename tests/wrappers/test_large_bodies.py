"""A large JSON body does not stall the other requests (issue 47): its long lists of floats are parsed on a worker
thread a piece at a time (`wrappers.transport.json_tensors`), so small requests on other connections are answered
while it is, in one real server on loopback."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from benchmarks.body_memory import json_body
from slipway.local_server import LocalServer
from slipway.ports import LOOPBACK
from tests.graphs import identity_graph, onnx_model
from tests.wrappers.folders import model_folder
from tests.wrappers.loopback import wait_until_read
from wrappers.limits.body_budget import BODY_LIMIT_ENV, MIB

pytestmark = pytest.mark.slow
LARGE = 32 * MIB
SMALL = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,2],"data":[0.5,1.5]}]}'


def max_graph(path: Path) -> Path:
    """y = the largest of x's values, x [1, N]: a large request, a tiny answer."""
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=1)],
        "max",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
    )
    onnx.save(onnx_model(graph), path)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    graphs = tmp_path_factory.mktemp("graphs")
    model_folder(root, "max", max_graph(graphs / "max.onnx"))
    model_folder(root, "echo", identity_graph(graphs / "echo.onnx", TensorProto.FLOAT), extra={"max_request_rows": 1 << 28})
    words = identity_graph(graphs / "words.onnx", TensorProto.STRING)
    model_folder(root, "words", words, extra={"max_request_rows": 1 << 28})
    with LocalServer(root, extra_env={BODY_LIMIT_ENV: str(2 * LARGE)}) as running:
        yield running


def test_a_small_request_is_answered_while_a_large_body_is_parsed(server):
    body, count = json_body(LARGE)
    body = body.replace(b'"shape":[%d]' % count, b'"shape":[1,%d]' % count).replace(b"0.123456789]", b"0.9]")
    sent, started, large = threading.Event(), threading.Event(), {}

    def send_large() -> None:
        connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=300)
        try:
            connection.request("POST", "/v2/models/max/infer", body=body, headers={"Content-Type": "application/json"})
            sent.set()
            response = connection.getresponse()
            started.set()  # its status line: the body parsed, the model run, the answer written
            large["status"], large["answer"] = response.status, json.loads(response.read())
        finally:
            started.set()
            connection.close()

    thread = threading.Thread(target=send_large, daemon=True)
    thread.start()
    assert sent.wait(timeout=120), "the large body was not sent in 120 s"
    wait_until_read(server.http_port)  # the server has read every byte of it
    small = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=300)
    answered_first = 0
    try:
        for _ in range(1000):
            small.request("POST", "/v2/models/max/infer", body=SMALL, headers={"Content-Type": "application/json"})
            answer = small.getresponse()
            assert answer.status == 200 and json.loads(answer.read())["outputs"][0]["data"] == [1.5]
            if started.is_set():
                break
            answered_first += 1
    finally:
        small.close()
    thread.join(timeout=300)
    assert large.get("status") == 200 and large["answer"]["outputs"][0]["data"] == [pytest.approx(0.9)], large
    # answered before the large body's answer began (dozens here); none when the body was parsed on the event loop,
    # which then ran the model and wrote the answer without letting another request in
    assert answered_first >= 1


def test_a_large_answer_is_written_a_piece_at_a_time_as_the_same_json(server):
    body, count = json_body(LARGE // 4)
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=300)
    try:
        connection.request("POST", "/v2/models/echo/infer", body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        status, text = answer.status, answer.read()
    finally:
        connection.close()
    assert status == 200 and answer.getheader("content-type") == "application/json", text[:500]
    output = json.loads(text)["outputs"][0]
    assert output["shape"] == [count] and output["data"] == [float(np.float32(0.123456789))] * count


WORDS = ["", "café", 'a "quoted" word', "back\\slash", "日本語", "😀", "a,b]", "tab\there"]


def _post(server, model: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=300)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def _strings_body(values: list, count: int) -> bytes:
    tensor = {"name": "x", "datatype": "BYTES", "shape": [count], "data": values}
    return json.dumps({"inputs": [tensor]}).encode()  # \u00e9, \" and the like: json.dumps escapes them


def test_a_large_body_of_strings_is_answered_with_the_same_strings(server):
    values = WORDS * 40_000  # about 2.5 MB of JSON: parsed a piece at a time, off the event loop
    status, text = _post(server, "words", _strings_body(values, len(values)))
    assert status == 200, text[:500]
    assert json.loads(text)["outputs"][0]["data"] == values


@pytest.mark.parametrize(
    "values, count, line",
    [
        (WORDS * 40_000, 320_001, "input 'x': data holds 320000 values, which does not fill shape [320001] exactly"),
        (WORDS * 40_000 + [7], 320_001, "input 'x': BYTES data must be strings"),
    ],
    ids=["wrong-count", "a-number"],
)
def test_a_large_body_of_strings_that_does_not_fit_is_refused_400_with_one_line(server, values, count, line):
    status, text = _post(server, "words", _strings_body(values, count))
    assert status == 400 and line in json.loads(text)["error"], text[:500]
