"""Registering system shared-memory regions: the V2 extension's REST endpoints and gRPC methods,
the ones `tritonclient.http` and `tritonclient.grpc` call.

REST: MLServer mounts a model's `custom_handler` methods on its REST app when the model
loads; `OnnxRuntime` inherits these. gRPC: MLServer builds its gRPC server from its own
protos and offers no way to add methods, so the first model that turns shared memory on
adds a handler for Triton's three methods to the server the launcher (`wrappers.launch`)
handed over (gRPC servers look handlers up per call). Without one, the log says so, and
registering over REST still serves gRPC requests: the regions are the server process's
(`wrappers.process_state`'s `regions`). Everything here answers only while a loaded model has
`parameters.extra.shared_memory: true`: registering lets a network client map the pod's
shared memory and have outputs written into it, which a server should not allow unasked.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

import grpc
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from mlserver.handlers import custom_handler

from wrappers import process_state
from wrappers.mlserver_compat.grpc_path import add_to_running_grpc_servers
from wrappers.operations.loaded_models import LoadedModels
from wrappers.protocol import json_parsing
from wrappers.shm.regions import Regions, SharedMemoryError

logger = logging.getLogger(__name__)
_PREFIX = "/v2/systemsharedmemory"
_GRPC_SERVICE = "inference.GRPCInferenceService"


def _enabling_models() -> LoadedModels:
    """The loaded models with shared memory on; the first adds the gRPC registration methods."""
    return process_state.current().switches.named("shm.enabled", install=_serve_grpc_registration)


def enable(model) -> None:
    _enabling_models().add(model)


def disable(model) -> None:
    """The model unloads: once no loaded model enables shared memory, all regions are forgotten."""
    _enabling_models().discard(model)
    if not _enabling_models():
        _regions().unregister()


class SharedMemoryEndpoints:
    """Register, unregister and list system shared-memory regions (Triton's paths and bodies)."""

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/register")
    async def shm_register(self, region_name: str, request: Request) -> Response:
        try:
            body = _json_object(await request.body())
        except SharedMemoryError as err:
            return _error(str(err))
        key, offset, byte_size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        return _answer(lambda: _regions().register(region_name, key, offset, byte_size))

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/unregister")
    async def shm_unregister(self, region_name: str) -> Response:
        return _answer(lambda: _regions().unregister(region_name))

    @custom_handler(rest_path=f"{_PREFIX}/unregister")
    async def shm_unregister_all(self) -> Response:
        return _answer(lambda: _regions().unregister())

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/status", rest_method="GET")
    async def shm_status(self, region_name: str) -> Response:
        return _answer(lambda: _regions().status(region_name), with_result=True)

    @custom_handler(rest_path=f"{_PREFIX}/status", rest_method="GET")
    async def shm_status_all(self) -> Response:
        return _answer(lambda: _regions().status(), with_result=True)


def _regions() -> Regions:
    """The process's regions, looked up at each request (a test may serve with a fresh state)."""
    return process_state.current().regions


def _if_enabled(action: Callable[[], Any]) -> Any:
    if not _enabling_models():
        raise SharedMemoryError(
            "system shared memory is off in this server; set parameters.extra.shared_memory=true "
            "in a model's model-settings.json to turn it on"
        )
    return action()


def _answer(action: Callable[[], Any], with_result: bool = False) -> Response:
    try:
        result = _if_enabled(action)
    except SharedMemoryError as err:
        return _error(str(err))
    return JSONResponse(result) if with_result else Response(status_code=200)


def _json_object(body: bytes) -> dict:
    expected = 'send a JSON object: {"key": "/name", "offset": 0, "byte_size": N}'
    try:
        parsed = json_parsing.loads(body) if body else None
    except json.JSONDecodeError as err:
        raise SharedMemoryError(f"the body is not JSON ({err}); {expected}") from None
    if not isinstance(parsed, dict):
        raise SharedMemoryError(expected)
    return parsed


def _error(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


# -- gRPC ------------------------------------------------------------------------------------


def _serve_grpc_registration() -> None:
    """Add Triton's registration methods to the gRPC server of this process (the launcher's), once."""
    if not add_to_running_grpc_servers(_grpc_handler()):
        logger.warning(
            "no gRPC server in this process (not started by wrappers.launch): register shared-memory regions over REST"
        )


@functools.cache  # one handler per process: each model that turns shared memory on asks for it again
def _grpc_handler() -> grpc.GenericRpcHandler:
    messages = _messages()

    def method(request_type: str, response_type: str, action: Callable[[Any], Any]) -> grpc.RpcMethodHandler:
        async def handle(request, context):
            try:
                result = _if_enabled(lambda: action(request))
            except SharedMemoryError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            return result if result is not None else messages[response_type]()

        return grpc.unary_unary_rpc_method_handler(
            handle,
            request_deserializer=messages[request_type].FromString,
            response_serializer=messages[response_type].SerializeToString,
        )

    def register(request) -> None:
        _regions().register(request.name, request.key, request.offset, request.byte_size)

    def unregister(request) -> None:
        _regions().unregister(request.name or None)

    def status(request) -> Any:
        response = messages["SystemSharedMemoryStatusResponse"]()
        for region in _regions().status(request.name or None):
            response.regions[region["name"]].CopyFrom(response.RegionStatus(**region))
        return response

    return grpc.method_handlers_generic_handler(
        _GRPC_SERVICE,
        {
            "SystemSharedMemoryRegister": method(
                "SystemSharedMemoryRegisterRequest", "SystemSharedMemoryRegisterResponse", register
            ),
            "SystemSharedMemoryUnregister": method(
                "SystemSharedMemoryUnregisterRequest", "SystemSharedMemoryUnregisterResponse", unregister
            ),
            "SystemSharedMemoryStatus": method("SystemSharedMemoryStatusRequest", "SystemSharedMemoryStatusResponse", status),
        },
    )


def _messages() -> dict[str, Any]:
    """The extension's six messages, as Triton's grpc_service.proto numbers their fields, built in a
    private descriptor pool (MLServer's protos do not have them)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    string, uint64 = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_UINT64
    optional = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    region = [("name", 1, string), ("key", 2, string), ("offset", 3, uint64), ("byte_size", 4, uint64)]
    proto = descriptor_pb2.FileDescriptorProto(name="slipway_system_shared_memory.proto", package="inference", syntax="proto3")

    def message(container, name: str, fields) -> descriptor_pb2.DescriptorProto:
        added = container.add(name=name)
        for field_name, number, kind in fields:
            added.field.add(name=field_name, number=number, type=kind, label=optional)
        return added

    message(proto.message_type, "SystemSharedMemoryRegisterRequest", region)
    message(proto.message_type, "SystemSharedMemoryRegisterResponse", [])
    message(proto.message_type, "SystemSharedMemoryUnregisterRequest", region[:1])
    message(proto.message_type, "SystemSharedMemoryUnregisterResponse", [])
    message(proto.message_type, "SystemSharedMemoryStatusRequest", region[:1])
    response = message(proto.message_type, "SystemSharedMemoryStatusResponse", [])
    message(response.nested_type, "RegionStatus", region)
    entry = message(response.nested_type, "RegionsEntry", [("key", 1, string)])
    entry.field.add(
        name="value",
        number=2,
        label=optional,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".inference.SystemSharedMemoryStatusResponse.RegionStatus",
    )
    entry.options.map_entry = True
    response.field.add(
        name="regions",
        number=1,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".inference.SystemSharedMemoryStatusResponse.RegionsEntry",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        descriptor.name: message_factory.GetMessageClass(descriptor)
        for descriptor in pool.FindFileByName(proto.name).message_types_by_name.values()
    }
