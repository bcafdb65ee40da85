"""MLServer's gRPC internals: its V2 converters, its servicer's raw-answer rule, its running gRPC server.

MLServer 1.7 has no hook for how a `ModelInferRequest` becomes an `InferenceRequest` (it unpacks raw
contents into Python lists with `struct`), nor for adding gRPC methods to its server. `wrappers.transport.grpc_raw`
swaps the two converters and the servicer's `_GetReturnRaw`; `wrappers.transport.shm_endpoints` adds Triton's
shared-memory methods to the server once it runs. What they touch is checked here first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from mlserver.grpc import converters, servicers
from mlserver.grpc import dataplane_pb2 as pb  # noqa: F401  (the V2 messages, for wrappers.transport.grpc_raw)

from wrappers.mlserver_compat import IncompatibleMLServer, require, require_function, running

_CONVERTERS = "mlserver.grpc.converters"
_SERVICER = "mlserver.grpc.servicers.InferenceServicer"


@dataclass(frozen=True)
class MLServerConverters:
    """MLServer's own converters, as they were before `replace_grpc_converters`: the fast path hands them
    whatever it does not take itself."""

    request_to_types: Callable[[Any], Any]
    response_from_types: Callable[..., Any]
    parameters_to_types: Callable[[Any], Any]
    parameters_from_types: Callable[[Any], Any]
    input_tensor_to_types: Callable[[Any], Any]
    requested_output_to_types: Callable[[Any], Any]


_original: MLServerConverters | None = None


def check_converters() -> MLServerConverters:
    """The converters and the raw-answer rule `replace_grpc_converters` swaps, as MLServer 1.7 has them, and
    the servicer still calling them (by these names, on these classes)."""
    request = require(converters, "ModelInferRequestConverter", f"{_CONVERTERS}.ModelInferRequestConverter")
    response = require(converters, "ModelInferResponseConverter", f"{_CONVERTERS}.ModelInferResponseConverter")
    parameters = require(converters, "ParametersConverter", f"{_CONVERTERS}.ParametersConverter")
    found = MLServerConverters(
        request_to_types=require_function(
            request, "to_types", f"{_CONVERTERS}.ModelInferRequestConverter.to_types", ("pb_object",)
        ),
        response_from_types=require_function(
            response, "from_types", f"{_CONVERTERS}.ModelInferResponseConverter.from_types", ("type_object", "use_raw")
        ),
        parameters_to_types=require_function(
            parameters, "to_types", f"{_CONVERTERS}.ParametersConverter.to_types", ("pb_object",)
        ),
        parameters_from_types=require_function(
            parameters, "from_types", f"{_CONVERTERS}.ParametersConverter.from_types", ("type_object",)
        ),
        input_tensor_to_types=require_function(
            require(converters, "InferInputTensorConverter", f"{_CONVERTERS}.InferInputTensorConverter"),
            "to_types",
            f"{_CONVERTERS}.InferInputTensorConverter.to_types",
            ("pb_object",),
        ),
        requested_output_to_types=require_function(
            require(converters, "InferRequestedOutputTensorConverter", f"{_CONVERTERS}.InferRequestedOutputTensorConverter"),
            "to_types",
            f"{_CONVERTERS}.InferRequestedOutputTensorConverter.to_types",
            ("pb_object",),
        ),
    )
    servicer = require(servicers, "InferenceServicer", _SERVICER)
    if not isinstance(servicer.__dict__.get("_GetReturnRaw"), staticmethod):
        raise IncompatibleMLServer(f"{_SERVICER}._GetReturnRaw", "is not a static method")
    require_function(servicer, "_GetReturnRaw", f"{_SERVICER}._GetReturnRaw", ("request",))
    for name, converter in (("ModelInferRequestConverter", request), ("ModelInferResponseConverter", response)):
        if getattr(servicers, name, None) is not converter:
            raise IncompatibleMLServer(f"mlserver.grpc.servicers.{name}", f"is not {_CONVERTERS}.{name}")
    infer_names = _code_names(require(servicer, "ModelInfer", f"{_SERVICER}.ModelInfer"), "ModelInfer")
    if not {"_GetReturnRaw", "ModelInferResponseConverter", "_InsertHeaders"} <= infer_names:
        raise IncompatibleMLServer(
            f"{_SERVICER}.ModelInfer", "no longer calls _GetReturnRaw, _InsertHeaders and ModelInferResponseConverter"
        )
    if "ModelInferRequestConverter" not in _code_names(
        require(servicer, "_InsertHeaders", f"{_SERVICER}._InsertHeaders"), "_InsertHeaders"
    ):
        raise IncompatibleMLServer(f"{_SERVICER}._InsertHeaders", "no longer calls ModelInferRequestConverter")
    return found


def replace_grpc_converters(
    request_to_types: Callable[..., Any], response_from_types: Callable[..., Any], return_raw: Callable[[Any], bool]
) -> MLServerConverters:
    """Swap MLServer's request and response converters (as class methods: they take `cls` first) and its
    servicer's `_GetReturnRaw` for these, process-wide, once; returns MLServer's own, unpatched converters."""
    global _original
    if _original is None:
        _original = check_converters()
    if getattr(converters.ModelInferRequestConverter.to_types, "__func__", None) is not request_to_types:
        converters.ModelInferRequestConverter.to_types = classmethod(request_to_types)
        converters.ModelInferResponseConverter.from_types = classmethod(response_from_types)
        servicers.InferenceServicer._GetReturnRaw = staticmethod(return_raw)
    return _original


def check_running_servers() -> None:
    """What `add_to_running_grpc_servers` calls: grpc.aio's public method, on the servers the launcher handed over."""
    require_function(
        grpc.aio.Server, "add_generic_rpc_handlers", "grpc.aio.Server.add_generic_rpc_handlers", ("self", "generic_rpc_handlers")
    )


def add_to_running_grpc_servers(handler: grpc.GenericRpcHandler) -> int:
    """Serve `handler` on this process's gRPC server (once per handler: pass the same object again), the one
    `wrappers.launch` built or will build as it starts serving; returns how many servers have it or will (0
    where no launcher runs here). MLServer builds its server from its own protos and offers no way to add
    methods; grpc looks handlers up per call, so methods added to a built server are served."""
    check_running_servers()
    return running.add_grpc_handler(handler)


def _code_names(function: Callable[..., Any], name: str) -> set[str]:
    """The global and attribute names the code of `function` uses, looking through decorators (MLServer's
    `handle_mlserver_error` wraps its servicer's methods without `functools.wraps`)."""
    seen: list[Any] = [function]
    while seen:
        current = seen.pop()
        code = getattr(current, "__code__", None)
        if code is not None and code.co_name == name:
            return set(code.co_names)
        seen += [getattr(current, "__wrapped__", None)] if hasattr(current, "__wrapped__") else []
        seen += [cell.cell_contents for cell in getattr(current, "__closure__", None) or () if callable(cell.cell_contents)]
    raise IncompatibleMLServer(f"{_SERVICER}.{name}", "has no code of that name behind its decorators")
