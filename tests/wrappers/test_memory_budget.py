"""One request cannot take the server past its memory limit (issue 47): a server started inside a real memory cgroup
sizes the bodies it admits by the memory left there (`wrappers.limits.body_budget`), answers a larger one 413
before reading it, and serves one just under that size without being killed; gRPC messages get the same bound,
where grpc's own 4 MiB refused a single batch of images."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import onnx
import pytest
from tritonclient.grpc import service_pb2_grpc

from slipway.artifact import SETTINGS_FILE
from slipway.local_server import LocalServer
from slipway.paths import PROJECT_ROOT
from slipway.ports import LOOPBACK
from tests.graphs import identity_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import raw_request
from wrappers.limits.body_budget import JSON_AMPLIFICATION, MIB

pytestmark = pytest.mark.slow
MEMORY_LIMIT = 1 << 30  # a small pod's
NUMBER = b"0.123456789,"  # one FP32 value as JSON text: 12 bytes


@pytest.fixture(scope="module")
def memory_cgroup():
    """A memory cgroup of its own, limited to MEMORY_LIMIT (v1's memory controller, or v2's), removed afterwards."""
    v1, v2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")
    if os.geteuid() != 0:
        pytest.skip("needs root to make a memory cgroup (CI runs make test as root)")
    if (v1 / "cgroup.procs").is_file():
        folder, limit_file = v1 / f"slipway-test-{os.getpid()}", "memory.limit_in_bytes"
    elif "memory" in (v2 / "cgroup.controllers").read_text(errors="replace").split():
        folder, limit_file = v2 / f"slipway-test-{os.getpid()}", "memory.max"
    else:
        pytest.skip("this kernel has no memory cgroup controller mounted")
    folder.mkdir()
    try:
        (folder / limit_file).write_text(str(MEMORY_LIMIT))
        yield folder
    finally:
        folder.rmdir()  # the server has stopped: its cgroup is empty


@pytest.fixture(scope="module")
def server(tmp_path_factory, memory_cgroup):
    root = tmp_path_factory.mktemp("repository")
    graph = identity_graph(tmp_path_factory.mktemp("graphs") / "echo.onnx", onnx.TensorProto.FLOAT)
    model_folder(root, "echo", graph, extra={"max_request_rows": 1 << 28})
    with LocalServer(root, cgroup=memory_cgroup) as running:
        yield running


def _admitted(server) -> int:
    found = re.findall(r"REST bodies admitted up to (\d+) MiB", server.log_path.read_text(errors="replace"))
    assert found, "the load log says no body limit"
    return int(found[-1]) * MIB


def _json_body(size: int) -> tuple[bytes, int]:
    count = size // len(NUMBER)
    head = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[%d],"data":[' % count
    return head + (NUMBER * count)[:-1] + b"]}]}", count


def _post(server, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{server.http_url}/v2/models/echo/infer", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_body_limit_is_sized_by_the_memory_the_cgroup_leaves(server):
    admitted = _admitted(server)
    assert MIB <= admitted <= MEMORY_LIMIT // JSON_AMPLIFICATION, admitted  # 256 MiB without the cgroup


def _post_declared(server, length: int) -> tuple[int, dict]:
    """A body that says it is `length` bytes long and sends its first few: the answer must not wait for the rest."""
    connection = http.client.HTTPConnection(LOOPBACK, server.http_port, timeout=30)
    try:
        connection.putrequest("POST", "/v2/models/echo/infer")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(length))
        connection.endheaders(b'{"inputs": [')
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_a_body_over_the_limit_is_refused_413_and_one_under_it_is_served_within_the_memory_limit(server):
    admitted = _admitted(server)
    status, answer = _post_declared(server, admitted + 1)
    assert status == 413 and f"the body is over {admitted} bytes ({admitted >> 20} MiB)" in answer["error"], answer
    assert "SLIPWAY_MAX_BODY_BYTES" in answer["error"] and "binary data" in answer["error"], answer  # how to send it
    body, count = _json_body(admitted - MIB)
    status, answer = _post(server, body)
    assert status == 200, answer
    data = answer["outputs"][0]["data"]
    assert len(data) == count and data[0] == data[-1] == pytest.approx(0.123456789)
    assert server._process.poll() is None  # not OOM-killed: the cgroup's limit held it


def test_grpc_messages_get_the_same_bound_not_grpcs_4_mib(server):
    admitted = _admitted(server)
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(server.grpc_target, options=options) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        values = np.arange((8 * MIB) // 4, dtype=np.float32)  # twice what grpc receives by default
        answer = stub.ModelInfer(raw_request("echo", {"x": ("FP32", [values.size], values.tobytes())}), timeout=120)
        np.testing.assert_array_equal(np.frombuffer(answer.raw_output_contents[0], dtype=np.float32), values)
        over = np.zeros((admitted + MIB) // 4, dtype=np.float32)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(raw_request("echo", {"x": ("FP32", [over.size], over.tobytes())}), timeout=120)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()


# Run in its own process, as MLServer runs the runtime (importing it here would register MLServer's V2 protobufs
# beside tritonclient's). MLServer's registry applies its adaptive batching before `load`, as here.
LET_GO = """
import asyncio, json, sys
from mlserver.batching import load_batching
from mlserver.settings import ModelSettings
from mlserver.types import InferenceRequest, RequestInput
from wrappers.runtime import OnnxRuntime

async def main(path, values):
    settings = ModelSettings.parse_file(path)
    settings._source = path
    model = OnnxRuntime(settings)
    await load_batching(model)
    await model.load()
    data = [float(value) for value in range(values)]
    request = InferenceRequest(inputs=[RequestInput(name="x", datatype="FP32", shape=[values], data=data)])
    answer = await OnnxRuntime.predict(model, request) if model.settings.max_batch_size > 1 else await model.predict(request)
    await model.unload()
    print(json.dumps({"kept": len(request.inputs[0].data.root), "answered": list(answer.outputs[0].data.root) == data}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""
LONG = 1 << 14  # wrappers.protocol.v2_codec.LET_GO_VALUES (importing it here would import MLServer)


@pytest.mark.parametrize(
    "extra, batching, values, kept",
    [
        ({}, None, LONG, 0),  # decoded into an array: the list of Python floats is let go before the answer is built
        ({}, None, LONG - 1, LONG - 1),  # a short one is kept: little to gain, and emptying it costs every request
        ({"payload_log": {"url": "http://127.0.0.1:9/events"}}, None, LONG, LONG),  # the log reads it after the model
        ({}, {"max_batch_size": 4, "max_batch_time": 0.01}, LONG, LONG),  # MLServer's batcher reads it after the model
    ],
    ids=["plain", "short", "payload-log", "mlserver-batching"],
)
def test_a_decoded_requests_json_data_is_let_go_unless_something_reads_it_after_the_model(
    tmp_path, extra, batching, values, kept
):
    graph = identity_graph(tmp_path / "echo.onnx", onnx.TensorProto.FLOAT)
    folder = model_folder(tmp_path, "echo", graph, extra={"max_request_rows": 1 << 20, **extra}, batching=batching)
    done = subprocess.run(
        [sys.executable, "-c", LET_GO, str(folder / SETTINGS_FILE), str(values)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"kept": kept, "answered": True}, result
