"""Slots of shared memory through which a front end hands rows to the session host and reads the outputs back.

Each front end owns a ring of slots, each an anonymous shared-memory file (`memfd_create`) whose descriptor
is passed to the host once, over the Unix socket (`protocol`). A request's arrays are copied into a free
slot, the host reads them in place (no pickling, no copy on its side), runs them and writes the outputs
into the same slot; the front end copies the outputs out and only then frees the slot. A slot is therefore
never reused before its outputs are read, and the host touches a slot only between a request and its reply.
A slot grows (never shrinks: the file is sealed against shrinking, so a mapping can never SIGBUS) when a
request or its outputs need more room; the message says the slot's size, and the other side maps it again.
"""

from __future__ import annotations

import asyncio
import fcntl
import math
import mmap
import os
from collections.abc import Sequence

import numpy as np

ALIGN = 64  # each array starts on a cache line: ONNX Runtime and memcpy like aligned buffers
MIN_SLOT_BYTES = 1 << 20


class RingError(RuntimeError):
    """A slot cannot be made or used; the message says which and why."""


def layout(arrays: Sequence[tuple[np.dtype, tuple[int, ...]]]) -> tuple[list[int], int]:
    """Offsets of arrays laid one after another in a slot, each aligned to ALIGN bytes, and the bytes needed.

    Both sides compute the same offsets from the dtypes and shapes a message carries, so offsets are never sent.
    """
    offsets, end = [], 0
    for dtype, shape in arrays:
        start = -(-end // ALIGN) * ALIGN
        offsets.append(start)
        end = start + math.prod(shape) * np.dtype(dtype).itemsize
    return offsets, end


def grown_size(needed: int) -> int:
    """The size a slot grows to for `needed` bytes: the next power of two, at least MIN_SLOT_BYTES."""
    return max(MIN_SLOT_BYTES, 1 << max(0, needed - 1).bit_length())


class SlotMap:
    """One process's mapping of a slot's file, mapped again when the file has grown."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = 0
        self._map: mmap.mmap | None = None
        self.remap(size)

    def remap(self, size: int) -> None:
        """Map `size` bytes (the file is at least that long). The old mapping is dropped, not closed: arrays that
        still view it keep it alive until they go."""
        if size != self.size:
            self._map = mmap.mmap(self.fd, size)
            self.size = size

    def grow(self, needed: int) -> None:
        """Lengthen the file (only its current holder may) and map it whole."""
        if needed > self.size:
            size = grown_size(needed)
            os.ftruncate(self.fd, size)
            self.remap(size)

    def write(self, arrays: Sequence[np.ndarray]) -> None:
        """Copy `arrays` into the slot at their `layout` offsets, growing it first where they need more room."""
        offsets, needed = layout([(array.dtype, array.shape) for array in arrays])
        self.grow(needed)
        for array, offset in zip(arrays, offsets):
            if array.dtype.hasobject:
                raise RingError(f"an array of {array.dtype} cannot go through shared memory; only numeric tensors can")
            np.copyto(self._view(array.dtype, array.shape, offset), array, casting="no")

    def views(self, arrays: Sequence[tuple[np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        """The arrays in the slot, in place (valid until the slot is written again)."""
        offsets, needed = layout(arrays)
        if needed > self.size:
            raise RingError(f"arrays of {needed} bytes do not fit in a slot of {self.size}")
        return [self._view(dtype, shape, offset) for (dtype, shape), offset in zip(arrays, offsets)]

    def copies(self, arrays: Sequence[tuple[np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        """The arrays in the slot, copied out: the slot may be reused once this returns."""
        return [view.copy() for view in self.views(arrays)]

    def _view(self, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
        count = math.prod(shape)
        assert self._map is not None
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)


def new_slot_file(index: int, size: int = MIN_SLOT_BYTES) -> int:
    """An anonymous shared-memory file of `size` bytes, sealed so that it can grow but never shrink."""
    fd = os.memfd_create(f"slipway-slot-{index}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


class SlotRing:
    """A front end's slots and which of them are free: a request takes one, its reply's reader gives it back.

    `acquire` waits (on the event loop) while every slot is in flight: back-pressure instead of unbounded memory.
    """

    def __init__(self, count: int, size: int = MIN_SLOT_BYTES):
        if count < 1:
            raise RingError("a ring needs at least one slot")
        self.slots = [SlotMap(new_slot_file(index, size), size) for index in range(count)]
        self._free: asyncio.Queue[int] | None = None

    @property
    def fds(self) -> list[int]:
        return [slot.fd for slot in self.slots]

    def _queue(self) -> asyncio.Queue[int]:
        if self._free is None:  # made on first use, on the event loop that uses it
            self._free = asyncio.Queue()
            for index in range(len(self.slots)):
                self._free.put_nowait(index)
        return self._free

    async def acquire(self) -> int:
        return await self._queue().get()

    def release(self, index: int) -> None:
        self._queue().put_nowait(index)

    def free_count(self) -> int:
        return self._queue().qsize()

    def close(self) -> None:
        for slot in self.slots:
            os.close(slot.fd)
