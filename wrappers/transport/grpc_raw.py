"""The fast gRPC path: `raw_input_contents` become NumPy views, raw outputs come from `tobytes`.

MLServer 1.7 converts raw contents with `struct.unpack` into Python lists (and back with
`struct.pack`), which costs more CPU than running MobileNetV2; a truncated buffer also
escapes as a `struct.error` (gRPC INTERNAL) instead of INVALID_ARGUMENT. This module
swaps MLServer's two gRPC converters for ones that keep the data as arrays, but only
for models served by `wrappers.runtime.OnnxRuntime` (they register here at load), so
other runtimes in the same server see exactly what MLServer gives them. Their typed contents
must lie in the field of their datatype, as Triton reads them (MLServer reads any field). Requests whose
inputs lie in shared memory (`wrappers.shm.regions`) take the same path and are answered
raw, as Triton answers them.

It works where the gRPC server and the model share a process (`parallel_workers: 0`,
Slipway's default); with worker processes MLServer's own converters stay in charge.
The rules on contents are `wrappers.transport.grpc_rules`, which has no MLServer import.

The two converters also time each answered request, from the request's conversion to the answer's, into
`slipway_request_seconds` (`wrappers.operations.metrics`): MLServer's servicer calls both in the call's own task,
so the start is kept in a context variable of that task.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

import numpy as np
from mlserver.errors import InferenceError
from mlserver.types import InferenceRequest, InferenceResponse, Parameters, RequestInput, ResponseOutput, TensorData

from slipway.v2_wire import BYTES, REGION, TensorError, from_raw, to_raw
from wrappers import process_state
from wrappers.mlserver_compat.grpc_path import MLServerConverters, pb, replace_grpc_converters
from wrappers.operations.loaded_models import LoadedModels
from wrappers.transport import grpc_rules

_NO_DATA = np.empty(0, dtype=np.uint8)
# The current call's model, version (as the client named them) and start, set by the request's conversion
_started: ContextVar[tuple[str, str, float] | None] = ContextVar("slipway_grpc_request_started", default=None)
_mlserver: MLServerConverters  # MLServer's own converters, set when ours replace them


def _install() -> None:
    """Ours in place of MLServer's (`wrappers.mlserver_compat` checks theirs first; once per process)."""
    global _mlserver
    _mlserver = replace_grpc_converters(_request_to_types, _response_from_types, _answer_raw)


def fast_models() -> LoadedModels:
    """The models whose raw gRPC requests go through NumPy; adding one installs the converters."""
    return process_state.current().switches.named("grpc_raw.fast", install=_install)


def shared_memory_models() -> LoadedModels:
    """The models served with shared memory on: only their inputs may lie in a region instead of the request."""
    return process_state.current().switches.named("grpc_raw.shared_memory")


def _answer_raw(request: pb.ModelInferRequest) -> bool:
    """Raw outputs for raw requests (MLServer's rule) and for requests with inputs in shared memory:
    they carry no contents to mirror, and tritonclient reads outputs only from raw contents."""
    return bool(request.raw_input_contents) or _has_shared_inputs(request)


def _has_shared_inputs(request: pb.ModelInferRequest) -> bool:
    """Inputs naming a region, for a model that reads regions; any other model gets its raw buffers as sent,
    and the runtime says it does not use shared memory."""
    return (
        request.model_name in fast_models()
        and request.model_name in shared_memory_models()
        and any(REGION in tensor.parameters for tensor in request.inputs)
    )


def _request_to_types(cls, pb_object: pb.ModelInferRequest) -> InferenceRequest:
    _started.set((pb_object.model_name, pb_object.model_version, time.perf_counter()))
    if pb_object.model_name not in fast_models():
        return _mlserver.request_to_types(pb_object)
    for tensor in pb_object.inputs:
        if tensor.HasField("contents"):
            _check_typed_contents(tensor, raw=bool(pb_object.raw_input_contents))
    if not (pb_object.raw_input_contents or _has_shared_inputs(pb_object)):
        _check_every_input_has_contents(pb_object)
        return _mlserver.request_to_types(pb_object)
    request = InferenceRequest.model_construct(
        id=pb_object.id,
        parameters=_mlserver.parameters_to_types(pb_object.parameters),
        inputs=[_request_input(tensor) for tensor in pb_object.inputs],
    )
    if pb_object.outputs:
        request.outputs = [_mlserver.requested_output_to_types(o) for o in pb_object.outputs]
    raw_contents = pb_object.raw_input_contents
    reads_regions = pb_object.model_name in shared_memory_models()
    empty = []
    for tensor in request.inputs:
        if tensor.data.root:
            continue
        if reads_regions and getattr(tensor.parameters, REGION, None) is not None:  # in shared memory: no raw buffer
            tensor.data = TensorData.model_construct(root=_NO_DATA)  # an array: the outputs go back raw too
        else:
            empty.append(tensor)
    problem = grpc_rules.raw_buffers_problem(len(raw_contents), [tensor.name for tensor in empty])
    if problem:
        raise InferenceError(problem)
    for tensor, raw in zip(empty, raw_contents):
        try:
            array = from_raw(raw, tensor.datatype, tensor.shape, tensor.name)
        except TensorError as err:
            raise InferenceError(str(err)) from err
        tensor.data = TensorData.model_construct(root=array)
    return request


def _check_typed_contents(tensor: pb.ModelInferRequest.InferInputTensor, *, raw: bool) -> None:
    """Typed contents only in their datatype's field, and never beside raw contents (`grpc_rules`)."""
    sent = [field.name for field, _ in tensor.contents.ListFields()]
    problem = grpc_rules.typed_contents_problem(tensor.name, tensor.datatype, sent, raw=raw)
    if problem:
        raise InferenceError(problem)


def _check_every_input_has_contents(request: pb.ModelInferRequest) -> None:
    """A request without raw contents carries each input's data in its typed contents: an input with none is
    named here with where its data goes (MLServer would read an empty list, and the runtime could only say
    that the data holds 0 values)."""
    for tensor in request.inputs:
        problem = grpc_rules.missing_data_problem(
            tensor.name,
            tensor.datatype,
            list(tensor.shape),
            has_contents=bool(tensor.contents.ListFields()),
            in_shared_memory=REGION in tensor.parameters,
        )
        if problem:
            raise InferenceError(problem)


def _request_input(tensor: pb.ModelInferRequest.InferInputTensor) -> RequestInput:
    """MLServer's converter, minus its work on typed contents when there are none (the raw case)."""
    if tensor.HasField("contents"):
        return _mlserver.input_tensor_to_types(tensor)
    return RequestInput.model_construct(
        name=tensor.name,
        shape=list(tensor.shape),
        datatype=tensor.datatype,
        parameters=_mlserver.parameters_to_types(tensor.parameters),
        data=TensorData.model_construct(root=[]),
    )


def _response_from_types(cls, type_object: InferenceResponse, use_raw: bool = False) -> pb.ModelInferResponse:
    """The answer as `_answer`, its request timed from the request's conversion (an answer means a served model)."""
    response = _answer(type_object, use_raw)
    started = _started.get()
    if started is not None:
        _started.set(None)
        process_state.current().metrics.observe_request(started[0], started[1], "grpc", time.perf_counter() - started[2])
    return response


def _answer(type_object: InferenceResponse, use_raw: bool) -> pb.ModelInferResponse:
    """The response with every output as raw contents, built directly: MLServer's converter would walk
    pydantic models and build empty typed contents for each output first.

    A response with an FP16 output is raw whatever the request was, as Triton answers: the V2 protobuf has
    no typed contents for FP16 (MLServer's converter fails, gRPC INTERNAL), and where one output is raw, all are.
    """
    use_raw = grpc_rules.answers_raw(use_raw, (_datatype(output) for output in type_object.outputs))
    if not use_raw or not any(_as_raw(output) for output in type_object.outputs):
        return _mlserver.response_from_types(_text_as_bytes(type_object), use_raw=use_raw)
    response = pb.ModelInferResponse(
        model_name=type_object.model_name,
        outputs=[_output_tensor(output) for output in type_object.outputs],
        raw_output_contents=[to_raw(output.data.root, output.datatype) for output in type_object.outputs],
    )
    if type_object.model_version is not None:
        response.model_version = type_object.model_version
    if type_object.id is not None:
        response.id = type_object.id
    _copy_parameters(type_object.parameters, response.parameters)
    return response


def _text_as_bytes(response: InferenceResponse) -> InferenceResponse:
    """The response with its BYTES outputs' str items as bytes: str suits JSON (top-k labels, a graph's
    strings), but typed `bytes_contents` take bytes only, and MLServer's converter fails on str (gRPC INTERNAL)."""
    if not any(_is_text(output) for output in response.outputs):
        return response
    outputs = [
        output.model_copy(
            update={
                "data": TensorData.model_construct(
                    root=[item.encode() if isinstance(item, str) else item for item in output.data.root]
                )
            }
        )
        if _is_text(output)
        else output
        for output in response.outputs
    ]
    return response.model_copy(update={"outputs": outputs})


def _is_text(output: ResponseOutput) -> bool:
    """A BYTES output whose data holds str items."""
    data = output.data.root if output.data is not None else None
    return _datatype(output) == BYTES and isinstance(data, list) and any(isinstance(item, str) for item in data)


def _datatype(output: ResponseOutput) -> str:
    """The output's datatype as a str: runtimes set a str or MLServer's enum."""
    return getattr(output.datatype, "value", output.datatype)


def _as_raw(output: ResponseOutput) -> bool:
    """Built by the wrappers runtime for a raw answer: an array, or an output written to shared memory
    (its raw contents stay empty, keeping the others' positions)."""
    return isinstance(output.data.root, np.ndarray) or getattr(output.parameters, REGION, None) is not None


def _output_tensor(output: ResponseOutput) -> pb.ModelInferResponse.InferOutputTensor:
    tensor = pb.ModelInferResponse.InferOutputTensor(name=output.name, shape=output.shape, datatype=str(output.datatype))
    _copy_parameters(output.parameters, tensor.parameters)
    return tensor


def _copy_parameters(parameters: Parameters | None, into) -> None:
    """Parameters as MLServer's converter writes them (what protobuf cannot carry, e.g. headers, is left out)."""
    if parameters:
        for key, value in _mlserver.parameters_from_types(parameters).items():
            into[key].CopyFrom(value)
