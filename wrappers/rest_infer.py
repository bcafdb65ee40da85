"""The fast REST infer route: V2 infer requests for this runtime's models, without FastAPI's per-request work.

Measured on digits (2 CPUs, REST, concurrency 8, four alternating rounds): MLServer's REST
server spent 0.45 ms of its one event-loop thread per request, and that thread capped
throughput with a third of the machine idle. About 0.12 ms of it was FastAPI's own work
around the endpoint: solving its dependencies, then dumping, re-validating and serializing
the response through pydantic. Answered by this route, the same server spent 0.33 ms and
served 36% more requests per second.

The route sits where MLServer's own infer routes are, inside every HTTP middleware MLServer
installs (its Prometheus HTTP metrics, gzip, CORS, tracing, error handlers), and calls
MLServer's data plane as MLServer's endpoint does: model metrics, CloudEvents headers, the
response cache and versions all stay as they were. Only two steps change: the body becomes an
`InferenceRequest` by one pydantic validation, and the response becomes JSON by one dump,
with MLServer's own JSON encoder. Anything the route does not take as it is (another
runtime's model; a JSON body that is not JSON or does not validate; another content type)
goes to MLServer's own route, with the body as read: malformed requests get exactly MLServer's
answers (HTTP 422 naming the field).

It also serves what MLServer cannot: Triton's binary tensor extension (`wrappers.binary_data`),
`tritonclient.http`'s default, where tensors travel as bytes after a JSON header. A request
that breaks that extension's rules gets HTTP 400 saying how.

Compressed bodies (`Content-Encoding: gzip` or `deflate`, `tritonclient.http`'s
`request_compression_algorithm`) are inflated here for every model, before either route reads
them: MLServer inflates gzip only, whole, on its event loop (1.5 MB of gzip held every request
of the server for 17 s and took 3 GB), and deflate not at all. Here they are inflated on a worker
thread, up to `MAX_INFLATED_BYTES`; past it, or undecodable, HTTP 400 says so.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from mlserver.codecs.json import encode_to_json_bytes
from mlserver.errors import InferenceError
from mlserver.rest.responses import Response
from mlserver.types import InferenceRequest
from mlserver.utils import extract_headers, insert_headers
from starlette.responses import Response as BinaryResponse
from starlette.routing import Route

from wrappers import binary_data, rest_json
from wrappers.loaded_models import LoadedModels

logger = logging.getLogger(__name__)

INFER_PATHS = ("/v2/models/{model_name}/infer", "/v2/models/{model_name}/versions/{model_version}/infer")
OCTET_STREAM = "application/octet-stream"
# A compressed body inflates up to this size: a few kilobytes of gzip can claim gigabytes. 256 MiB holds a batch
# of 64 224x224x3 images as V2 JSON text (about 120 MB) with room to spare; bigger requests travel uncompressed,
# where the sender pays for every byte the server holds, or split.
MAX_INFLATED_BYTES = 256 << 20
_INFLATE_STEP = 4 << 20  # inflated per zlib call: one step's copy holds the GIL briefly, whatever the body claims
_ZLIB_WINDOW = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# Bodies inflate on these threads (zlib lets go of the GIL), so a big one stalls no other request; two at a time
# keep what compressed requests can make the server hold to twice MAX_INFLATED_BYTES. Others wait their turn.
_inflaters = ThreadPoolExecutor(max_workers=2, thread_name_prefix="slipway-inflate")


def _install() -> None:
    for app in _mlserver_rest_apps():
        routes = app.router.routes
        if any(isinstance(getattr(route, "app", None), FastInferRoute) for route in routes):
            continue
        mlserver_routes = {route.path: route for route in routes if getattr(route, "path", None) in INFER_PATHS}
        if len(mlserver_routes) < len(INFER_PATHS):  # another MLServer: leave its routes alone
            logger.warning("MLServer's REST app has no routes %s: REST infer requests go through FastAPI", INFER_PATHS)
            continue
        for path in INFER_PATHS:
            routes.insert(0, Route(path, FastInferRoute(mlserver_routes[path]), methods=["POST"]))
        logger.info("REST infer requests for wrappers.runtime models are answered without FastAPI's per-request work")


# The models whose REST infer requests this route answers; adding one installs the route (once per REST app).
fast_models = LoadedModels(install=_install)


def _mlserver_rest_apps() -> list[FastAPI]:
    """MLServer's REST app(s) in this process; none in a worker process (`parallel_workers` > 0)."""
    return [
        obj for obj in gc.get_objects()
        if isinstance(obj, FastAPI) and any(getattr(route, "path", None) == INFER_PATHS[0] for route in obj.routes)
    ]


class FastInferRoute:
    """The ASGI app behind one infer path; MLServer's route for that path answers what it does not take."""

    def __init__(self, mlserver_route) -> None:
        self._mlserver_route = mlserver_route
        self._data_plane = mlserver_route.endpoint.__self__._data_plane  # the data plane MLServer's endpoint calls

    async def __call__(self, scope: dict, receive, send) -> None:
        name, version = scope["path_params"]["model_name"], scope["path_params"].get("model_version")
        headers = _headers(scope)
        binary = binary_data.HEADER in headers
        taken = name in fast_models and (binary or _is_json(headers))
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if not taken and encoding == "identity":
            await self._mlserver_route.handle(scope, receive, send)
            return
        body = await _read_body(receive)
        if encoding != "identity":
            body = await _inflated(body, encoding)
            scope = _uncompressed(scope, len(body))
        payload = _payload(body, headers, binary) if taken else None
        if payload is None:
            await self._mlserver_route.handle(scope, _replaying(body, receive), send)
            return
        binary_outputs = binary_data.binary_outputs(payload)
        insert_headers(payload, headers)
        result = await self._data_plane.infer(payload, name, version)
        response_headers = extract_headers(result) or {}
        parts = binary_data.split_outputs(result, binary_outputs)
        content = result.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
        if not parts:
            await Response(content, headers=response_headers)(scope, receive, send)
            return
        header = encode_to_json_bytes(content)
        response_headers[binary_data.HEADER] = str(len(header))
        answer = BinaryResponse(b"".join([header, *parts]), headers=response_headers, media_type=OCTET_STREAM)
        await answer(scope, receive, send)


def _payload(body: bytes, headers: dict[str, str], binary: bool) -> InferenceRequest | None:
    """The request the body holds; None for a JSON body MLServer's route should answer (not JSON, not V2)."""
    if binary:
        try:
            return binary_data.request_from_body(body, headers[binary_data.HEADER])
        except binary_data.BinaryDataError as err:
            raise InferenceError(str(err)) from None  # HTTP 400, by MLServer's error handler
    try:
        return InferenceRequest.model_validate(rest_json.parse(body))
    except ValueError:  # not JSON, or not a V2 request (pydantic's ValidationError is a ValueError)
        return None


async def _inflated(body: bytes, encoding: str) -> bytes | bytearray:
    """The body as sent before `Content-Encoding`, inflated off the event loop; HTTP 400 where it cannot be."""
    window = _ZLIB_WINDOW.get(encoding)
    if window is None:
        raise InferenceError(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")
    return await asyncio.get_running_loop().run_in_executor(_inflaters, _inflate, body, encoding, window)


def _inflate(body: bytes, encoding: str, window: int) -> bytearray:
    """Inflate in steps, so that a body claiming more than MAX_INFLATED_BYTES is refused having made no more.
    A gzip body may hold several members, as `gzip.decompress` (MLServer's way) reads them."""
    inflated, pending, inflater = bytearray(), body, zlib.decompressobj(window)
    try:
        while True:
            piece = inflater.decompress(pending, min(_INFLATE_STEP, MAX_INFLATED_BYTES + 1 - len(inflated)))
            inflated += piece
            if len(inflated) > MAX_INFLATED_BYTES:
                raise InferenceError(
                    f"the {encoding} body inflates past {MAX_INFLATED_BYTES} bytes ({MAX_INFLATED_BYTES >> 20} MiB), "
                    "the most this server inflates; send it uncompressed, or split the request")
            pending = inflater.unconsumed_tail
            if inflater.eof:
                if not inflater.unused_data:
                    return inflated
                if encoding != "gzip":
                    raise InferenceError(f"the deflate body has {len(inflater.unused_data)} bytes after its end; "
                                         "send one deflate stream")
                pending, inflater = inflater.unused_data, zlib.decompressobj(window)
            elif not pending and not piece:
                raise InferenceError(f"the {encoding} body is truncated; send all of it")
    except zlib.error as err:
        raise InferenceError(f"the body is not valid {encoding} data: {err}") from None


def _uncompressed(scope: dict, length: int) -> dict:
    """The scope as if the body had come inflated, so that MLServer's route does not inflate it again."""
    headers = [(key, value) for key, value in scope["headers"] if key not in (b"content-encoding", b"content-length")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


def _headers(scope: dict) -> dict[str, str]:
    """The request's headers as MLServer's endpoint passes them on (the first of repeated ones)."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return headers


def _is_json(headers: dict[str, str]) -> bool:
    """A body FastAPI would read as JSON: no content type, or application/json or application/*+json."""
    content_type = headers.get("content-type")
    if content_type is None:
        return True
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind.startswith("application/") and (kind == "application/json" or kind.endswith("+json"))


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive):
    """A `receive` that gives the body already read, then whatever the connection sends next."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
