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
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mlserver.errors import InferenceError

from wrappers.mlserver_compat.rest_app import check_router_layer, mlserver_rest_apps, wrap_router
from wrappers.request_bodies import MAX_BODY_BYTES

logger = logging.getLogger(__name__)

_INFLATE_STEP = 4 << 20  # inflated per zlib call: one step's copy holds the GIL briefly, whatever the body claims
_ZLIB_WINDOW = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
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
            scope = _uncompressed(scope, len(body))
        await self.app(scope, replaying(body, receive), send)


def headers_of(scope: dict) -> dict[str, str]:
    """The request's headers as MLServer's endpoints pass them on (the first of repeated ones)."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return headers


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
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise _over_the_limit("the body is over")
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _over_the_limit("the body is over")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _over_the_limit(what: str) -> InferenceError:
    """HTTP 400 (by MLServer's error handler) for a body past MAX_BODY_BYTES, sent or inflated, saying what fits."""
    return InferenceError(
        f"{what} {MAX_BODY_BYTES} bytes ({MAX_BODY_BYTES >> 20} MiB), the most this server reads; send fewer rows "
        "per request, or (from the same host) the tensors in shared memory")


async def _inflated(body: bytes, encoding: str) -> bytes | bytearray:
    window = _ZLIB_WINDOW.get(encoding)
    if window is None:
        raise InferenceError(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")
    return await asyncio.get_running_loop().run_in_executor(_inflaters, _inflate, body, encoding, window)


def _inflate(body: bytes, encoding: str, window: int) -> bytearray:
    """Inflate in steps, so that a body claiming more than MAX_BODY_BYTES is refused having made no more.
    A gzip body may hold several members, as `gzip.decompress` (MLServer's way) reads them."""
    inflated, pending, inflater = bytearray(), body, zlib.decompressobj(window)
    try:
        while True:
            piece = inflater.decompress(pending, min(_INFLATE_STEP, MAX_BODY_BYTES + 1 - len(inflated)))
            inflated += piece
            if len(inflated) > MAX_BODY_BYTES:
                raise _over_the_limit(f"the {encoding} body inflates past")
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
    """The scope as if the body had come inflated, so that MLServer's routes do not inflate it again."""
    headers = [(key, value) for key, value in scope["headers"] if key not in (b"content-encoding", b"content-length")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}
