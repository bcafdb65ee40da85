"""The messages between a front end and the session host: small, length-prefixed frames on a Unix socket.

Tensors never travel here: a request names a slot (`ring`) and the dtypes and shapes of the arrays in it,
a reply the same for the outputs, or an error. The one-time hello (the graph's description) is JSON; the
slots' descriptors follow it once, as SCM_RIGHTS ancillary data.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

_LENGTH = struct.Struct("<I")
_HEAD = struct.Struct("<IQB")  # slot, the slot's size in bytes, request: array count / reply: status
_STATS = struct.Struct("<dIdB")  # run seconds, rows in the run, this request's queue seconds, output count
_DIMS = struct.Struct("<B")
OK, INPUT_ERROR, ERROR = 0, 1, 2
MAX_FRAME = 1 << 20
HANDSHAKE_TIMEOUT_S = 30.0

Arrays = list[tuple[np.dtype, tuple[int, ...]]]


class ProtocolError(RuntimeError):
    """A frame that is not what the other side sends: the peer is not a Slipway front end or host of this version."""


@dataclass
class Reply:
    slot: int
    size: int
    status: int
    arrays: Arrays
    run_seconds: float = 0.0
    batch_rows: int = 0
    queue_seconds: float = 0.0
    message: str = ""


def _pack_arrays(arrays: Arrays) -> bytes:
    parts = []
    for dtype, shape in arrays:
        code = np.dtype(dtype).str.encode()
        parts.append(bytes([len(code)]) + code + _DIMS.pack(len(shape)) + struct.pack(f"<{len(shape)}q", *shape))
    return b"".join(parts)


def _unpack_arrays(payload: memoryview, start: int, count: int) -> Arrays:
    arrays, at = [], start
    for _ in range(count):
        length = payload[at]
        dtype = np.dtype(bytes(payload[at + 1 : at + 1 + length]).decode())
        at += 1 + length
        (ndim,) = _DIMS.unpack_from(payload, at)
        shape = struct.unpack_from(f"<{ndim}q", payload, at + 1)
        at += 1 + 8 * ndim
        arrays.append((dtype, tuple(shape)))
    if at != len(payload):
        raise ProtocolError(f"a frame of {len(payload)} bytes holds {at} bytes of arrays")
    return arrays


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


SERVING = 0xFFFFFFFF  # a request naming no slot: the front end has loaded the model and serves from now on


def serving() -> bytes:
    """A front end's word that its model is loaded (it reads replies, and answers requests, from now on)."""
    return frame(_HEAD.pack(SERVING, 0, 0))


def request(slot: int, size: int, arrays: Arrays) -> bytes:
    """A front end's request: run the arrays in `slot` (of `size` bytes)."""
    return frame(_HEAD.pack(slot, size, len(arrays)) + _pack_arrays(arrays))


def parse_request(payload: memoryview) -> tuple[int, int, Arrays]:
    slot, size, count = _HEAD.unpack_from(payload)
    return slot, size, _unpack_arrays(payload, _HEAD.size, count)


def reply(slot: int, size: int, arrays: Arrays, run_seconds: float, batch_rows: int, queue_seconds: float) -> bytes:
    """The host's answer: the outputs lie in `slot`, now `size` bytes long; with what the run cost, for metrics."""
    stats = _STATS.pack(run_seconds, batch_rows, queue_seconds, len(arrays))
    return frame(_HEAD.pack(slot, size, OK) + stats + _pack_arrays(arrays))


def error_reply(slot: int, size: int, status: int, message: str) -> bytes:
    return frame(_HEAD.pack(slot, size, status) + message.encode(errors="replace"))


def parse_reply(payload: memoryview) -> Reply:
    slot, size, status = _HEAD.unpack_from(payload)
    if status != OK:
        return Reply(slot, size, status, [], message=bytes(payload[_HEAD.size :]).decode(errors="replace"))
    run_seconds, batch_rows, queue_seconds, count = _STATS.unpack_from(payload, _HEAD.size)
    arrays = _unpack_arrays(payload, _HEAD.size + _STATS.size, count)
    return Reply(slot, size, status, arrays, run_seconds, batch_rows, queue_seconds)


class FrameReader:
    """Whole frames out of a byte stream that arrives in pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[memoryview]:
        self._buffer += data
        at = 0
        while len(self._buffer) - at >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer, at)
            if length > MAX_FRAME:
                raise ProtocolError(f"a frame of {length} bytes is over the {MAX_FRAME} a message may be")
            if len(self._buffer) - at - _LENGTH.size < length:
                break
            start = at + _LENGTH.size
            yield memoryview(bytes(self._buffer[start : start + length]))
            at = start + length
        del self._buffer[:at]


# -- the handshake: blocking, once per front end -----------------------------------------------------------


def send_hello(sock: socket.socket, description: dict) -> None:
    sock.sendall(frame(json.dumps(description).encode()))


def receive_hello(sock: socket.socket) -> dict:
    return json.loads(_receive_frame(sock))


def send_slots(sock: socket.socket, fds: list[int], sizes: list[int]) -> None:
    payload = frame(struct.pack(f"<I{len(sizes)}Q", len(sizes), *sizes))
    socket.send_fds(sock, [payload], fds)


def receive_slots(sock: socket.socket, max_slots: int) -> list[tuple[int, int]]:
    """The slots a front end sent: (descriptor, size) each."""
    data, fds, _flags, _addr = socket.recv_fds(sock, 8 + 8 * max_slots, max_slots)
    if len(data) < 8:
        for fd in fds:
            socket.close(fd)
        raise ProtocolError("the front end closed the connection before sending its slots")
    (_length, count) = struct.unpack_from("<II", data)
    sizes = struct.unpack_from(f"<{count}Q", data, 8)
    if len(fds) != count:
        for fd in fds:
            socket.close(fd)
        raise ProtocolError(f"the front end announced {count} slots and sent {len(fds)} descriptors")
    return list(zip(fds, sizes))


def _receive_frame(sock: socket.socket) -> bytes:
    (length,) = _LENGTH.unpack(_receive_exactly(sock, _LENGTH.size))
    if length > MAX_FRAME:
        raise ProtocolError(f"a frame of {length} bytes is over the {MAX_FRAME} a message may be")
    return _receive_exactly(sock, length)


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise ProtocolError("the peer closed the connection during the handshake")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
