"""Triton's binary tensor data extension for REST, which `tritonclient.http` uses by default.

A request with binary inputs carries an `Inference-Header-Content-Length: N` header: the
first N bytes of its body are the V2 JSON request, and each input whose parameters hold
`binary_data_size` has no `data`; its bytes follow the JSON, in input order (numbers
little-endian, BYTES elements each after a 4-byte little-endian length, as in gRPC's raw
contents). Outputs come back the same way when the request asks for them so: an output
whose parameters say `binary_data: true`, or every output when the request's parameters
say `binary_data_output: true` (what `tritonclient.http` sends when it names no outputs).

MLServer has no such extension: it refuses such a request (HTTP 400), so `tritonclient.http` works
against it only with `binary_data=False` everywhere, sending every number as JSON text.
Binary inputs are read as views of the body, with no text to parse (`wrappers.transport.rest_infer`
takes these requests for this runtime's models).
"""

from __future__ import annotations

import numpy as np
from mlserver.types import InferenceRequest, InferenceResponse, Parameters, TensorData
from pydantic import ValidationError

from slipway.cli import one_line
from slipway.v2_wire import BINARY_DATA_OUTPUT, BINARY_DATA_SIZE, BINARY_HEADER, BYTES, REGION, TensorError, from_raw, to_raw
from wrappers.protocol import json_parsing

HEADER = BINARY_HEADER.lower()  # as ASGI gives header names
SIZE = BINARY_DATA_SIZE


class BinaryDataError(ValueError):
    """The body does not follow the extension; the message says what is wrong and what to send."""


def request_from_body(body: bytes, header: str) -> InferenceRequest:
    """The request whose JSON is the body's first `header` bytes, binary inputs as views of the rest."""
    try:
        length = int(header)
    except ValueError:
        raise BinaryDataError(f"Inference-Header-Content-Length must be a byte count, got {header!r}") from None
    if not 0 < length <= len(body):
        raise BinaryDataError(
            f"Inference-Header-Content-Length is {length} but the body has {len(body)} bytes: it must count the "
            "bytes of the JSON request at the start of the body"
        )
    try:
        payload = InferenceRequest.model_validate(json_parsing.parse(body[:length], empty_data_for=(REGION, SIZE)))
    except ValidationError as err:
        raise BinaryDataError(f"the body's first {length} bytes are not a V2 inference request: {one_line(err)}") from None
    except ValueError as err:
        raise BinaryDataError(f"the body's first {length} bytes are not JSON: {err}") from None
    view, offset = memoryview(body), length
    for tensor in payload.inputs:
        size = getattr(tensor.parameters, SIZE, None)
        if size is None:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BinaryDataError(f"input {tensor.name!r}: {SIZE} must be a byte count, got {size!r}")
        if tensor.data.root:
            raise BinaryDataError(f"input {tensor.name!r} has {SIZE} and data too; send one or the other")
        if offset + size > len(body):
            raise BinaryDataError(
                f"input {tensor.name!r}: its {size} bytes of binary data would end at byte {offset + size}, "
                f"but the body has {len(body)}"
            )
        try:
            array = from_raw(view[offset : offset + size], tensor.datatype, tensor.shape, tensor.name)
        except TensorError as err:
            raise BinaryDataError(str(err).replace("raw contents", "binary data")) from None
        tensor.data = TensorData.model_construct(root=array)
        offset += size
    if offset != len(body):
        raise BinaryDataError(
            f"the body has {len(body) - offset} bytes after the JSON request and the inputs' binary data; "
            f"give each binary input its {SIZE}, in input order"
        )
    return payload


def binary_outputs(payload: InferenceRequest) -> set[str] | bool:
    """The outputs to answer in binary: named ones, or True for every output (`binary_data_output`)."""
    default = getattr(payload.parameters, BINARY_DATA_OUTPUT, False) is True
    named = {output.name: getattr(output.parameters, "binary_data", None) for output in payload.outputs or []}
    if not named:
        return default
    return {name for name, binary in named.items() if binary is True or (binary is None and default)}


def split_outputs(result: InferenceResponse, binary: set[str] | bool) -> list[bytes]:
    """Take the binary outputs' data out of `result` (each gets its `binary_data_size`); turn arrays left in
    the others into lists for JSON; leave outputs written into shared memory alone. Returns the binary parts,
    in output order."""
    parts = []
    for output in result.outputs:
        data = output.data.root
        if getattr(output.parameters, REGION, None) is not None:
            continue  # written into shared memory: the response only says where
        if binary is True or (binary and output.name in binary):
            raw = to_raw(np.asarray(data, dtype=object if output.datatype == BYTES else None), output.datatype)
            parts.append(raw)
            extra = output.parameters.model_dump(exclude_none=True) if output.parameters else {}
            output.parameters = Parameters(**{**extra, SIZE: len(raw)})
            output.data = None  # no `data` in the JSON (dumped with exclude_none)
        elif isinstance(data, np.ndarray):
            output.data = TensorData.model_construct(root=data.tolist())
    return parts
