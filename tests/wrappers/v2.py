"""Small V2 clients for tests: REST through urllib, gRPC through tritonclient's own protos and stub.

Never MLServer's protos: they clash with tritonclient's in one process.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc


def post(url: str, body: bytes | dict, content_type: str = "application/json") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")  # repository calls answer empty
    except urllib.error.HTTPError as err:
        text = err.read()
        try:
            return err.code, json.loads(text or b"{}")
        except json.JSONDecodeError:
            return err.code, {"raw": text.decode(errors="replace")}


def error_text(body: dict) -> str:
    """MLServer answers {"error": ...}; FastAPI's validation answers {"detail": [...]}."""
    return json.dumps(body.get("error") or body.get("detail") or body)


def json_input(name: str, array: np.ndarray, datatype: str = "FP32") -> dict:
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "data": array.ravel().tolist()}


def raw_request(model: str, inputs: dict[str, tuple[str, list[int], bytes]], version: str = "") -> service_pb2.ModelInferRequest:
    """A ModelInferRequest with each input as (datatype, shape, raw bytes)."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, (datatype, shape, raw) in inputs.items():
        tensor = request.inputs.add(name=name, datatype=datatype)
        tensor.shape.extend(shape)
        request.raw_input_contents.append(raw)
    return request


class GrpcClient:
    """A raw V2 gRPC stub; `infer` returns the response or raises grpc.RpcError."""

    def __init__(self, target: str):
        self.channel = grpc.insecure_channel(target)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    def infer(self, request: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
        return self.stub.ModelInfer(request, timeout=30)

    def close(self) -> None:
        self.channel.close()


def raw_output(response: service_pb2.ModelInferResponse, index: int = 0, dtype=np.float32) -> np.ndarray:
    shape = list(response.outputs[index].shape)
    return np.frombuffer(response.raw_output_contents[index], dtype=dtype).reshape(shape)


def scrape(url: str) -> dict[str, float]:
    """Prometheus text format -> {'name{labels}': value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples
