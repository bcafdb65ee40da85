"""The rules for a REST request body, as functions of headers and bytes (no server): its size and its encoding.

A body may hold at most the server's limit (`wrappers.limits.body_budget` sizes it), sent or inflated; a
compressed one (gzip, deflate) is inflated in steps, so a body claiming more than the limit is refused having made
no more, and a truncated or trailing stream is refused too. Each refusal is a `BodyError` whose message says what
to send (`BodyTooLarge` for the limit); `wrappers.transport.body_layer` applies the rules in front of MLServer's
routes and answers HTTP 413 or 400.
"""

from __future__ import annotations

import zlib

from wrappers.limits.body_budget import BODY_LIMIT_ENV, JSON_AMPLIFICATION

INFLATE_STEP = 4 << 20  # inflated per zlib call: one step's copy holds the GIL briefly, whatever the body claims
ZLIB_WINDOW = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyError(ValueError):
    """The body is too large, or not valid in its encoding; the message says what to send."""


class BodyTooLarge(BodyError):
    """The body is over the limit, sent or inflated (HTTP 413)."""


def headers_of(scope: dict) -> dict[str, str]:
    """The request's headers as MLServer's endpoints pass them on (the first of repeated ones)."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        headers.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return headers


def over_the_limit(what: str, limit: int) -> BodyTooLarge:
    """The refusal of a body past the limit, sent or inflated, saying what fits."""
    return BodyTooLarge(
        f"{what} {limit} bytes ({limit >> 20} MiB), the most this server reads; send fewer rows per request, the "
        "tensors as binary data (tritonclient's default) or, from the same host, in shared memory; or raise the "
        f"server's {BODY_LIMIT_ENV} (its memory limit must hold about {JSON_AMPLIFICATION} times the largest body)"
    )


def check_declared_length(headers: dict[str, str], limit: int) -> None:
    """Refuse by Content-Length, before a byte is read."""
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise over_the_limit("the body is over", limit)


def zlib_window(encoding: str) -> int:
    """zlib's window bits for a Content-Encoding (lower case); BodyError for one not supported."""
    window = ZLIB_WINDOW.get(encoding)
    if window is None:
        raise BodyError(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")
    return window


def inflate(body: bytes, encoding: str, window: int, limit: int) -> bytearray:
    """Inflate in steps, so that a body claiming more than `limit` is refused having made no more.
    A gzip body may hold several members, as `gzip.decompress` (MLServer's way) reads them."""
    inflated, pending, inflater = bytearray(), body, zlib.decompressobj(window)
    try:
        while True:
            piece = inflater.decompress(pending, min(INFLATE_STEP, limit + 1 - len(inflated)))
            inflated += piece
            if len(inflated) > limit:
                raise over_the_limit(f"the {encoding} body inflates past", limit)
            pending = inflater.unconsumed_tail
            if inflater.eof:
                if not inflater.unused_data:
                    return inflated
                if encoding != "gzip":
                    raise BodyError(
                        f"the deflate body has {len(inflater.unused_data)} bytes after its end; send one deflate stream"
                    )
                pending, inflater = inflater.unused_data, zlib.decompressobj(window)
            elif not pending and not piece:
                raise BodyError(f"the {encoding} body is truncated; send all of it")
    except zlib.error as err:
        raise BodyError(f"the body is not valid {encoding} data: {err}") from None


def uncompressed(scope: dict, length: int) -> dict:
    """The scope as if the body had come inflated, so that MLServer's routes do not inflate it again."""
    headers = [(key, value) for key, value in scope["headers"] if key not in (b"content-encoding", b"content-length")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}
