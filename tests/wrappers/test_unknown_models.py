"""Requests for models a server does not serve cost it one series, whatever names clients send (issue 47): MLServer
labels its request metrics with the client's model name and version, five series each, so 3,000 made-up names grew
the metrics endpoint from 95 KB to 4.7 MB. The data plane now looks the model up first (`servers.build`)."""

from __future__ import annotations

import urllib.request

import grpc
import onnx
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from slipway.local_server import LocalServer
from tests.graphs import identity_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import error_text, post

NAMES = 20  # per protocol


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    model_folder(root, "known", identity_graph(tmp_path_factory.mktemp("graphs") / "known.onnx", onnx.TensorProto.FLOAT))
    with LocalServer(root) as running:
        yield running


def _metrics(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as answer:
        return answer.read().decode()


def _series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_unknown_model_names_add_no_series_and_are_counted_in_one(server):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.5]}]}
    for number in range(NAMES):
        status, answer = post(f"{server.http_url}/v2/models/made-up-{number}/infer", body)
        assert status == 404 and f"Model made-up-{number} not found" in error_text(answer), (status, answer)
    status, answer = post(f"{server.http_url}/v2/models/known/versions/9/infer", body)
    assert status == 404 and "Model known with version 9 not found" in error_text(answer), (status, answer)
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for number in range(NAMES):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(service_pb2.ModelInferRequest(model_name=f"invented-{number}"), timeout=10)
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND, refused.value.details()
    status, answer = post(f"{server.http_url}/v2/models/known/infer", body)  # still serving
    assert status == 200 and answer["outputs"][0]["data"] == [1.5], answer

    text = _metrics(server)
    leaked = [line for line in _series(text) if "made-up-" in line or "invented-" in line or 'version="9"' in line]
    assert not leaked, leaked[:5]
    counted = [line for line in _series(text) if line.startswith("slipway_unknown_model_requests_total")]
    assert len(counted) == 1 and float(counted[0].split()[-1]) == 2 * NAMES + 1, counted
    assert any(line.startswith('model_infer_request_success_total{model="known"') for line in _series(text))
