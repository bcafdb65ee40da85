"""Every REST request body, on every route, read within a limit and inflated off the event loop.

MLServer's routes read whatever a client sends, whole, and inflate gzip whole on the one event
loop: 1.5 MB of gzip held every request of the server for 17 s and took 3 GB, on the infer routes
and on any other that takes a body (the model repository's, custom endpoints such as shared-memory
registration). Deflate they do not read at all.

One layer in front of MLServer's router, inside its error handlers, takes each body first: past the
limit `wrappers.limits.body_budget` sizes at each load (by its Content-Length, before a byte is read; else as
its bytes arrive, never holding the rest) it answers HTTP 413 naming the limit. A body over a quarter of the limit
waits for the one before it to be answered, so that two large ones never stack their decoding peaks. A compressed body (`Content-Encoding: gzip`
or `deflate`, `tritonclient.http`'s `request_compression_algorithm`) is inflated on a worker thread,
in steps, up to the same limit, and the route behind sees it as if it had been sent uncompressed.
The rules themselves (limit, encodings, inflating) are `wrappers.transport.body_rules`, which has no MLServer import.

The same layer times each answered (2xx) infer request, from its first byte read to its answer sent, into
`slipway_request_seconds` (`wrappers.operations.metrics`): the request-level latency the canary judges.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from typing import Any

from mlserver.errors import InferenceError, MLServerError

from wrappers import process_state
from wrappers.limits import body_budget
from wrappers.mlserver_compat.rest_app import check_router_layer, mlserver_rest_apps, wrap_router
from wrappers.transport.body_rules import (
    BodyError,
    BodyTooLarge,
    check_declared_length,
    inflate,
    over_the_limit,
    uncompressed,
    zlib_window,
)
from wrappers.transport.body_rules import headers_of as headers_of  # re-exported: the fast REST route reads headers alike

logger = logging.getLogger(__name__)

_WITHOUT_BODY = frozenset({"GET", "HEAD", "OPTIONS"})
_INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")  # MLServer's two infer routes
LARGE_SHARE = 4  # a body over 1/LARGE_SHARE of the limit is large: large ones are answered one at a time


def install() -> None:
    """Size the limit for this process as it now is, and put the layer in front of the router of each MLServer
    REST app in this process (once per app). BodyBudgetError for a SLIPWAY_MAX_BODY_BYTES that is not a size."""
    check_router_layer()  # also where no app runs here (a worker process): a moved target fails every load alike
    sized = process_state.current().body_limit
    sized.bytes = body_budget.sized_here()
    logger.info(
        "REST bodies admitted up to %d MiB (%s=%s; memory limit %s, %d MiB held now)",
        sized.bytes >> 20,
        body_budget.BODY_LIMIT_ENV,
        os.environ.get(body_budget.BODY_LIMIT_ENV, "unset"),
        f"{memory >> 20} MiB" if (memory := body_budget.memory_limit()) else "none",
        body_budget.resident_bytes() >> 20,
    )
    for app in mlserver_rest_apps():
        wrap_router(app, BoundedBodies)


def limit() -> int:
    """The largest body this process admits now."""
    return process_state.current().body_limit.bytes


class BoundedBodies:
    """The ASGI layer: the app behind gets the body whole, within the limit, uncompressed, in one message."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in _WITHOUT_BODY:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        infer = _INFER_PATH.match(scope["path"])
        headers = headers_of(scope)
        budget = process_state.current().body_limit
        body: bytes | bytearray  # as sent, then inflated where it came compressed
        body = await read_body(receive, headers, budget.bytes)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            body = await _inflated(body, encoding, budget.bytes)
            scope = uncompressed(scope, len(body))
        large = len(body) * LARGE_SHARE > budget.bytes
        replay = replaying(body, receive)
        del body  # the route behind holds it only as long as it needs it: no frame here keeps it to the answer's end
        if infer is None:
            await self._forward(scope, large, replay, send)
            return
        status = 0

        async def send_noting_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self._forward(scope, large, replay, send_noting_status)
        if 200 <= status < 300:  # answered by a served model: its name is one of the server's, not any a client sends
            process_state.current().metrics.observe_request(infer[1], infer[2], "rest", time.perf_counter() - started)

    async def _forward(self, scope, large: bool, replay, send) -> None:
        if not large:
            await self.app(scope, replay, send)
            return
        budget = process_state.current().body_limit
        if budget.large is None:
            budget.large = asyncio.Semaphore(1)
        async with budget.large:  # its decoding peak is a multiple of its size: one such at a time
            await self.app(scope, replay, send)


def replaying(body: bytes | bytearray, receive):
    """A `receive` that gives the body already read, then whatever the connection sends next. It lets go of the
    body once given, so that the body lives only as long as whoever read it keeps it."""
    held: list[bytes | bytearray] = [body]
    del body

    async def replay() -> dict[str, Any]:
        if not held:
            return await receive()
        return {"type": "http.request", "body": held.pop(), "more_body": False}

    return replay


def _refusal(err: BodyError) -> MLServerError:
    """What MLServer's error handler answers for a refused body: 413 for its size, 400 for its encoding."""
    if isinstance(err, BodyTooLarge):
        return MLServerError(str(err), status_code=413)
    return InferenceError(str(err))


async def read_body(receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole body; past `limit`, HTTP 413 before the rest is read (by Content-Length, before any)."""
    try:
        check_declared_length(headers, limit)
    except BodyError as err:
        raise _refusal(err) from None
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _refusal(over_the_limit("the body is over", limit))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _inflated(body: bytes, encoding: str, limit: int) -> bytes | bytearray:
    """The body inflated on a worker thread; HTTP 413 or 400 (by MLServer's error handler) for what `inflate` refuses."""
    try:
        window = zlib_window(encoding)
        # On the process's inflating threads (zlib lets go of the GIL), so a big body stalls no other request; two
        # at a time keep what compressed requests can make the server hold to twice the limit. Others wait.
        inflaters = process_state.current().inflaters
        return await asyncio.get_running_loop().run_in_executor(inflaters, inflate, body, encoding, window, limit)
    except BodyError as err:
        raise _refusal(err) from None
