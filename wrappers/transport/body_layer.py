"""Every REST request body, on every route, read within a limit and inflated off the event loop.

MLServer's routes read whatever a client sends, whole, and inflate gzip whole on the one event
loop: 1.5 MB of gzip held every request of the server for 17 s and took 3 GB, on the infer routes
and on any other that takes a body (the model repository's, custom endpoints such as shared-memory
registration). Deflate they do not read at all.

One layer in front of MLServer's router, inside its error handlers, takes each body first: past
`MAX_BODY_BYTES` (by its Content-Length, before a byte is read; else as its bytes arrive, never
holding the rest) it answers HTTP 400 naming the limit. A compressed body (`Content-Encoding: gzip`
or `deflate`, `tritonclient.http`'s `request_compression_algorithm`) is inflated on a worker thread,
in steps, up to the same limit, and the route behind sees it as if it had been sent uncompressed.
The rules themselves (limit, encodings, inflating) are `wrappers.transport.body_rules`, which has no MLServer import.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mlserver.errors import InferenceError

from wrappers.mlserver_compat.rest_app import check_router_layer, mlserver_rest_apps, wrap_router
from wrappers.transport.body_rules import (
    MAX_BODY_BYTES,
    BodyError,
    check_declared_length,
    inflate,
    over_the_limit,
    uncompressed,
    zlib_window,
)
from wrappers.transport.body_rules import headers_of as headers_of  # re-exported: the fast REST route reads headers alike

logger = logging.getLogger(__name__)

_WITHOUT_BODY = frozenset({"GET", "HEAD", "OPTIONS"})
# Bodies inflate on these threads (zlib lets go of the GIL), so a big one stalls no other request; two at a time
# keep what compressed requests can make the server hold to twice MAX_BODY_BYTES. Others wait their turn.
_inflaters = ThreadPoolExecutor(max_workers=2, thread_name_prefix="slipway-inflate")


def install() -> None:
    """Put the layer in front of the router of each MLServer REST app in this process (once per app)."""
    check_router_layer()  # also where no app runs here (a worker process): a moved target fails every load alike
    for app in mlserver_rest_apps():
        wrap_router(app, BoundedBodies)


class BoundedBodies:
    """The ASGI layer: the app behind gets the body whole, within the limit, uncompressed, in one message."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in _WITHOUT_BODY:
            await self.app(scope, receive, send)
            return
        headers = headers_of(scope)
        body = await read_body(receive, headers)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            body = await _inflated(body, encoding)
            scope = uncompressed(scope, len(body))
        await self.app(scope, replaying(body, receive), send)


def replaying(body: bytes, receive):
    """A `receive` that gives the body already read, then whatever the connection sends next."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def read_body(receive, headers: dict[str, str]) -> bytes:
    """The whole body; past MAX_BODY_BYTES, HTTP 400 before the rest is read (by Content-Length, before any)."""
    try:
        check_declared_length(headers)
    except BodyError as err:
        raise InferenceError(str(err)) from None
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise InferenceError(str(over_the_limit("the body is over")))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _inflated(body: bytes, encoding: str) -> bytes | bytearray:
    """The body inflated on a worker thread; HTTP 400 (by MLServer's error handler) for what `inflate` refuses."""
    try:
        window = zlib_window(encoding)
        return await asyncio.get_running_loop().run_in_executor(_inflaters, inflate, body, encoding, window)
    except BodyError as err:
        raise InferenceError(str(err)) from None
