"""V2 tensors to arrays and back: a request's inputs checked and decoded, a response's outputs encoded.

Inputs come in four forms, each decoded once: raw gRPC contents already a checked NumPy view
(`wrappers.transport.grpc_raw`), arrays MLServer's adaptive batching merged, JSON lists (`wrappers.protocol.tensors`), or a
shared-memory location (`wrappers.protocol.shared_tensors`). The checks themselves are `wrappers.protocol.request_rules`;
a failed one is HTTP 400 (gRPC INVALID_ARGUMENT) and nothing runs.
"""

from __future__ import annotations

import numpy as np
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, RequestInput, ResponseOutput, TensorData

from engine.tensor_specs import TensorSpec
from slipway.v2_wire import BYTES, TensorError
from wrappers.protocol import request_rules
from wrappers.protocol.request_rules import RequestError
from wrappers.protocol.shared_tensors import SharedTensors
from wrappers.protocol.tensors import from_json, response_data
from wrappers.shm.regions import SharedMemoryError, location

# What the rules refuse in a request: each becomes MLServer's HTTP 400 (gRPC INVALID_ARGUMENT), message unchanged.
# (try/except, not a context manager: nothing is paid per request where nothing is refused.)
REFUSALS = (RequestError, TensorError, SharedMemoryError)


class RequestDecoder:
    """One model's request inputs as arrays, and the outputs a request asks for.

    `row_limit` is the rows one input may carry; `reject_non_finite` refuses NaN and infinities;
    BYTES inputs become text, but for `image_input` (encoded images stay bytes)."""

    def __init__(
        self,
        model: str,
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        *,
        row_limit: int,
        reject_non_finite: bool,
        image_input: str | None,
        shared: SharedTensors,
    ):
        self._model = model
        self.inputs_by_name = {spec.name: spec for spec in inputs}
        self._input_names = set(self.inputs_by_name)
        self._output_names = [spec.name for spec in outputs]
        self._row_limit, self._reject_non_finite, self._image_input = row_limit, reject_non_finite, image_input
        self._shared = shared

    def checked_inputs(self, payload: InferenceRequest) -> list[RequestInput]:
        try:
            request_rules.check_request_id(payload.id)
            request_rules.check_input_names(self._model, [item.name for item in payload.inputs], self._input_names)
        except RequestError as err:
            raise InferenceError(str(err)) from err
        return payload.inputs

    def decode(self, request_input: RequestInput) -> np.ndarray:
        try:
            return self._decode(request_input)
        except REFUSALS as err:
            raise InferenceError(str(err)) from err

    def _decode(self, request_input: RequestInput) -> np.ndarray:
        spec = self.inputs_by_name[request_input.name]
        shape = tuple(request_input.shape)
        request_rules.check_header(spec, request_input.datatype, shape, self._row_limit)
        data = request_input.data.root if isinstance(request_input.data, TensorData) else request_input.data
        where = location(request_input.parameters, spec.name)
        if where is not None:
            flat = self._shared.read(where, data, spec, shape)
        elif isinstance(data, np.ndarray):  # the raw gRPC path: already a checked view
            flat = data
        elif isinstance(data, list) and data and isinstance(data[0], np.ndarray):  # merged by MLServer
            flat = np.concatenate(data)
        else:
            flat = from_json(data, spec.datatype, list(shape), spec.name)
        request_rules.check_filled(flat.size, shape, spec.name)
        if self._reject_non_finite:
            request_rules.check_finite(flat, spec.name)
        if spec.datatype == BYTES and spec.name != self._image_input:  # encoded images stay bytes
            flat = request_rules.as_text(flat, spec.name)
        return flat.reshape(shape)

    def requested_outputs(self, payload: InferenceRequest) -> list[str]:
        wanted = [output.name for output in payload.outputs] if payload.outputs else []
        try:
            return request_rules.requested_outputs(self._model, wanted, self._output_names)
        except RequestError as err:
            raise InferenceError(str(err)) from err


LET_GO_VALUES = 1 << 14  # a shorter list is kept: what it holds is small, and emptying it costs every request


def let_go_of_json_data(request_inputs: list[RequestInput]) -> None:
    """Empty the JSON `data` of inputs already decoded into arrays, where it is a list of LET_GO_VALUES or more: a
    list of Python numbers holds a pointer and an object per value, several times the JSON text it came from, and
    held to the answer's end it adds all that to the peak of encoding the answer. Only where nothing reads the
    request after the model (no payload log, no MLServer adaptive batching): the caller decides."""
    for request_input in request_inputs:
        data = request_input.data.root if isinstance(request_input.data, TensorData) else request_input.data
        if isinstance(data, list) and len(data) >= LET_GO_VALUES:
            request_input.data = TensorData.model_construct(root=[])


def encode(name: str, array: np.ndarray, datatype: str, as_array: bool) -> ResponseOutput:
    """A response output: a flat array for the raw gRPC path (packed by `to_raw`), else a list for JSON."""
    return ResponseOutput.model_construct(
        name=name,
        shape=list(array.shape),
        datatype=datatype,
        data=TensorData.model_construct(root=response_data(array, datatype, as_array)),
    )


def rows(arrays: dict[str, np.ndarray]) -> int:
    """The row count all inputs share (`request_rules.rows`); HTTP 400 where they differ."""
    try:
        return request_rules.rows(arrays)
    except RequestError as err:
        raise InferenceError(str(err)) from err
