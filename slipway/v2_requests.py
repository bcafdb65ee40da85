"""V2 inference requests as a client sends them: a JSON body for REST (plain, or in Triton's binary extension),
a serialized `ModelInferRequest` with raw contents (or shared-memory locations) for gRPC.

Load generators (`loadtest`, the benchmarks) build one request and send it again and again, so every builder
returns bytes ready for the wire: nothing is serialized per request. The encodings are `slipway.v2_wire`'s, the
same the server decodes with. tritonclient's protos are imported only when a gRPC request is built: a process
that holds MLServer's own V2 protos (a server) must never register tritonclient's beside them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from slipway.v2_wire import BINARY_DATA_OUTPUT, BINARY_DATA_SIZE, BYTE_SIZE, OFFSET, REGION, Location, to_raw, v2_datatype


def json_request(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """A V2 REST request body as a dict, data flattened row-major as `tritonclient.http` sends it."""

    def values(array: np.ndarray) -> list[Any]:
        if array.dtype.kind in "OSU":
            return [item.decode() if isinstance(item, bytes) else str(item) for item in array.ravel()]
        return array.ravel().tolist()

    return {
        "inputs": [
            {"name": name, "datatype": v2_datatype(array), "shape": list(array.shape), "data": values(array)}
            for name, array in arrays.items()
        ]
    }


def rest_body(arrays: dict[str, np.ndarray]) -> bytes:
    return json.dumps(json_request(arrays)).encode()


def binary_rest_body(arrays: dict[str, np.ndarray]) -> tuple[bytes, int]:
    """A REST body in Triton's binary extension, as `tritonclient.http` sends it by default: the JSON header
    (every input as `binary_data_size`, every output asked for in binary), then the inputs' bytes. Returns the
    body and the header's length, for `BINARY_HEADER`."""
    inputs, parts = [], []
    for name, array in arrays.items():
        datatype = v2_datatype(array)
        raw = to_raw(array, datatype)
        inputs.append(
            {"name": name, "datatype": datatype, "shape": list(array.shape), "parameters": {BINARY_DATA_SIZE: len(raw)}}
        )
        parts.append(raw)
    header = json.dumps({"inputs": inputs, "parameters": {BINARY_DATA_OUTPUT: True}}).encode()
    return b"".join([header, *parts]), len(header)


def grpc_request(
    model: str, arrays: dict[str, np.ndarray], version: str = "", shared: dict[str, Location] | None = None
) -> bytes:
    """A serialized `ModelInferRequest` carrying every input as `raw_input_contents` (the fast path),
    but those named in `shared`: they go as where they lie in shared memory, with no data."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in arrays.items():
        datatype = v2_datatype(array)
        tensor = request.inputs.add(name=name, datatype=datatype)
        tensor.shape.extend(array.shape)
        where = (shared or {}).get(name)
        if where is None:
            request.raw_input_contents.append(to_raw(array, datatype))
        else:
            tensor.parameters[REGION].string_param = where.region
            tensor.parameters[OFFSET].int64_param = where.offset
            tensor.parameters[BYTE_SIZE].int64_param = where.byte_size
    serialized: bytes = request.SerializeToString()
    return serialized
