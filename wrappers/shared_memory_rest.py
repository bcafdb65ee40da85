"""REST endpoints of the V2 system shared-memory extension, the ones `tritonclient.http` calls.

MLServer mounts a model's `custom_handler` methods on its REST app when the model loads;
`OnnxRuntime` inherits these. The regions are the server process's
(`wrappers.shared_memory.REGIONS`), so a region registered here serves REST and gRPC
requests alike. The endpoints answer only while a loaded model has
`parameters.extra.shared_memory: true`: registering lets a network client map the pod's
shared memory and have outputs written into it, which a server should not allow unasked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from mlserver.handlers import custom_handler

from wrappers.shared_memory import REGIONS, SharedMemoryError

_PREFIX = "/v2/systemsharedmemory"
_enabling_models: set[str] = set()


def enable(model_name: str) -> None:
    _enabling_models.add(model_name)


def disable(model_name: str) -> None:
    """The model unloads: once no model enables shared memory, all regions are forgotten."""
    _enabling_models.discard(model_name)
    if not _enabling_models:
        REGIONS.unregister()


class SharedMemoryEndpoints:
    """Register, unregister and list system shared-memory regions (Triton's paths and bodies)."""

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/register")
    async def shm_register(self, region_name: str, request: Request) -> Response:
        body = await _json_object(request)
        if isinstance(body, Response):
            return body
        key, offset, byte_size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        return _answer(lambda: REGIONS.register(region_name, key, offset, byte_size))

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/unregister")
    async def shm_unregister(self, region_name: str) -> Response:
        return _answer(lambda: REGIONS.unregister(region_name))

    @custom_handler(rest_path=f"{_PREFIX}/unregister")
    async def shm_unregister_all(self) -> Response:
        return _answer(REGIONS.unregister)

    @custom_handler(rest_path=f"{_PREFIX}/region/{{region_name}}/status", rest_method="GET")
    async def shm_status(self, region_name: str) -> Response:
        return _answer(lambda: REGIONS.status(region_name), with_result=True)

    @custom_handler(rest_path=f"{_PREFIX}/status", rest_method="GET")
    async def shm_status_all(self) -> Response:
        return _answer(REGIONS.status, with_result=True)


def _answer(action: Callable[[], Any], with_result: bool = False) -> Response:
    if not _enabling_models:
        return _error(
            "system shared memory is off in this server; set parameters.extra.shared_memory=true "
            "in a model's model-settings.json to turn it on"
        )
    try:
        result = action()
    except SharedMemoryError as err:
        return _error(str(err))
    return JSONResponse(result) if with_result else Response(status_code=200)


async def _json_object(request: Request) -> dict | Response:
    body = await request.body()
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return _error('send a JSON object: {"key": "/name", "offset": 0, "byte_size": N}')
    return parsed


def _error(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)
