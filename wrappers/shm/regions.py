"""Tensors in POSIX shared memory: the server side of the V2 system shared-memory extension.

A client on the same host (in Kubernetes, a container of the same pod that mounts the same
memory-backed emptyDir at /dev/shm: `make manifests SHARED_MEMORY=1Gi`) registers a region of
a shared-memory object once, then sends requests whose tensors name the region, an offset and
a byte size instead of carrying their data; requested outputs can
be written into a region the same way. The bytes never cross gRPC or HTTP: for a 600 kB
MobileNetV2 image, moving them through gRPC is most of what a request costs the server and
the client outside the run itself (docs/benchmarks.md, "Where the rest of the MobileNetV2 gap is").

Regions belong to the server process, as in Triton (its `Regions` are the process state's,
`wrappers.process_state`); `wrappers.transport.shm_endpoints` registers
them over REST and gRPC. This module has no MLServer import: it opens, checks, reads and writes. The
parameter names and `Location` are the wire format's (`slipway.v2_wire`), shared with clients.
"""

from __future__ import annotations

import io
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from slipway.v2_wire import (
    BYTE_SIZE,
    BYTES,
    OFFSET,
    PARAMETERS,
    REGION,
    V2_TO_NUMPY,
    Location,
    TensorError,
    element_count,
    from_raw,
    to_raw,
)

SHM_ROOT = Path("/dev/shm")
# A key names one object directly in /dev/shm (shm_open's "/name"), never a path.
_KEY = re.compile(r"/?[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")


class SharedMemoryError(ValueError):
    """A region cannot be registered or used as asked; the message says what to send instead."""


@dataclass(frozen=True)
class Region:
    """`byte_size` bytes at `offset` into the shared-memory object `key`, open read-write.

    Tensors are copied in and out with `pread`/`pwrite` rather than used through a mapping:
    a client may shrink its object at any time, and touching a mapped page past the object's
    end is a SIGBUS that kills the whole server. A read of a shrunk object comes back short
    instead, and is refused. The copy costs ~0.05 ms for a 600 kB image, a small part of
    what carrying those bytes over gRPC costs. The descriptor closes when the last reference
    to the region goes, so a run that still holds an unregistered region reads what it was given.
    """

    name: str
    key: str
    offset: int
    byte_size: int
    file: io.FileIO = field(repr=False, compare=False)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def read(self, location: Location, tensor: str) -> np.ndarray:
        """A copy of the tensor's bytes, checked to lie inside this region and inside the object as it is now."""
        start = self.start(location, tensor)
        data = np.empty(location.byte_size, dtype=np.uint8)
        view = data.data  # a memoryview: preadv fills the array through it
        done = 0
        while done < location.byte_size:
            got = os.preadv(self.file.fileno(), [view[done:]], start + done)
            if got == 0:
                raise self._shrunk(start + location.byte_size, tensor)
            done += got
        return data

    def write(self, location: Location, raw: bytes, tensor: str) -> None:
        start = self.start(location, tensor)
        if os.fstat(self.file.fileno()).st_size < start + len(raw):  # pwrite would grow it back, silently
            raise self._shrunk(start + len(raw), tensor)
        view = memoryview(raw)
        while view:
            view = view[os.pwrite(self.file.fileno(), view, start + len(raw) - len(view)) :]

    def start(self, location: Location, tensor: str) -> int:
        """Where the tensor starts in the object, checked to lie inside the region."""
        end = location.offset + location.byte_size
        if end > self.byte_size:
            raise SharedMemoryError(
                f"tensor {tensor!r}: bytes {location.offset}..{end} lie outside region {self.name!r} "
                f"({self.byte_size} bytes); send an offset and byte size within the region"
            )
        return self.offset + location.offset

    def _shrunk(self, needed: int, tensor: str) -> SharedMemoryError:
        return SharedMemoryError(
            f"tensor {tensor!r}: shared-memory object {self.key!r} of region {self.name!r} no longer holds "
            f"{needed} bytes (it was shrunk after the region was registered); keep the object at its size "
            "while the region is registered, or register it again"
        )


def _count(region: str, what: str, value: object) -> int:
    """`value` as a byte count (an integer >= 0, not a boolean), or the error that says what to send."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SharedMemoryError(f"region {region!r}: {what} must be an integer >= 0, got {value!r}")
    return value


class Regions:
    """The regions registered in this server process, by name; safe to use from any thread."""

    def __init__(self, root: Path = SHM_ROOT):
        self._root = root
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: object, offset: object, byte_size: object) -> Region:
        """Open the region a client registers; `key`, `offset` and `byte_size` as the request sent them, checked here."""
        if not name:
            raise SharedMemoryError("a region needs a name: register it at /v2/systemsharedmemory/region/NAME/register")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise SharedMemoryError(
                f"key {key!r} is not a shared-memory object name; send the key the client passed to shm_open, "
                "e.g. '/input0' (letters, digits, '_', '.', '-'; no '/' inside)"
            )
        offset, byte_size = _count(name, "offset", offset), _count(name, "byte_size", byte_size)
        path = self._root / key.lstrip("/")
        with self._lock:
            if name in self._regions:
                raise SharedMemoryError(
                    f"region {name!r} is already registered (key {self._regions[name].key!r}); "
                    "unregister it first or pick another name"
                )
            region = self._regions[name] = Region(name, key, offset, byte_size, _open(path, key, offset + byte_size, name))
        return region

    def unregister(self, name: str | None = None) -> None:
        """Forget one region (an unknown name is no error) or, with no name, all of them.

        The descriptor is not closed here: a run may still hold the region, and it closes
        when the last reference goes.
        """
        with self._lock:
            if name:
                self._regions.pop(name, None)
            else:
                self._regions.clear()

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            if name:
                return [self._get(name).status()]
            return [region.status() for region in self._regions.values()]

    def read(self, location: Location, datatype: str, shape: list[int], tensor: str) -> np.ndarray:
        """An input tensor's data as a flat array (a copy: see `Region`)."""
        region = self.region(location.region)
        if datatype != BYTES:
            expected = element_count(shape, tensor) * np.dtype(V2_TO_NUMPY[datatype]).itemsize
            if location.byte_size != expected:
                raise SharedMemoryError(
                    f"input {tensor!r}: {BYTE_SIZE} is {location.byte_size} but shape {list(shape)} of {datatype} "
                    f"needs {expected} bytes; send the tensor's exact size"
                )
        try:
            return from_raw(region.read(location, tensor).data, datatype, shape, tensor)
        except TensorError as err:
            raise SharedMemoryError(str(err)) from err

    def write(self, location: Location, array: np.ndarray, datatype: str, tensor: str) -> int:
        """Write an output tensor into its region; returns the bytes written."""
        raw = to_raw(array, datatype)
        if len(raw) > location.byte_size:
            raise SharedMemoryError(
                f"output {tensor!r} needs {len(raw)} bytes but {BYTE_SIZE} is {location.byte_size}; "
                "give the output at least that much shared memory"
            )
        self.region(location.region).write(location, raw, tensor)
        return len(raw)

    def region(self, name: str) -> Region:
        with self._lock:
            return self._get(name)

    def _get(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise SharedMemoryError(
                f"no shared-memory region named {name!r} is registered (registered: {sorted(self._regions)}); "
                "register it first at /v2/systemsharedmemory/region/NAME/register"
            )
        return region


def location(parameters: Any, tensor: str) -> Location | None:
    """The shared-memory location a tensor's parameters name, or None when they name none."""
    values = {key: getattr(parameters, key, None) for key in PARAMETERS} if parameters is not None else {}
    if values.get(REGION) is None:
        extra = sorted(key for key, value in values.items() if value is not None)
        if extra:
            raise SharedMemoryError(f"tensor {tensor!r}: {extra} given without {REGION}; send the region's name too")
        return None
    region, offset, byte_size = values[REGION], values.get(OFFSET), values.get(BYTE_SIZE)
    offset = 0 if offset is None else offset
    if not isinstance(region, str) or not region:
        raise SharedMemoryError(f"tensor {tensor!r}: {REGION} must be a region's name, got {region!r}")
    if byte_size is None:
        raise SharedMemoryError(f"tensor {tensor!r}: {REGION} needs {BYTE_SIZE}, the tensor's size in bytes")
    for key, value in ((OFFSET, offset), (BYTE_SIZE, byte_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SharedMemoryError(f"tensor {tensor!r}: {key} must be an integer >= 0, got {value!r}")
    return Location(region, offset, byte_size)


def _open(path: Path, key: str, needed: int, name: str) -> io.FileIO:
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW)  # a link in /dev/shm must not lead elsewhere
    except OSError as err:
        raise SharedMemoryError(
            f"region {name!r}: cannot open shared-memory object {key!r} ({err.strerror}); create it first "
            "(shm_open, or tritonclient.utils.shared_memory.create_shared_memory_region) in this server's /dev/shm"
        ) from None
    file = io.FileIO(descriptor, "r+", closefd=True)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise SharedMemoryError(f"region {name!r}: {key!r} is not a shared-memory object")
        size = status.st_size
        if needed > size or size == 0:
            raise SharedMemoryError(
                f"region {name!r}: offset + byte_size is {needed} bytes but object {key!r} holds {size}; "
                "register a region inside the object"
            )
        return file
    except BaseException:
        file.close()
        raise
