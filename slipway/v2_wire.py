"""The V2 inference protocol's wire format, as both ends read and write it: datatypes <-> NumPy, raw bytes.

The client's request builders (`slipway.v2_requests`, used by `loadtest` and the benchmarks) and the server
(`wrappers`) must agree byte for byte on these tables and encodings, so they live here once, in the core,
which imports neither MLServer nor tritonclient. Raw bytes become an array view with `np.frombuffer`, where
MLServer builds and walks a Python float per element (150,528 for one 224x224x3 image), and every mismatch
(length, type, range) is a `TensorError` saying what to send.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

V2_TO_NUMPY = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "BOOL": np.bool_,
    "BYTES": np.object_,
}
BYTES = "BYTES"
# The V2 datatype of a NumPy array, for clients building requests (BYTES aside: str, bytes, object).
NUMPY_TO_V2 = {np.dtype(kind): name for name, kind in V2_TO_NUMPY.items() if name != BYTES}
_LENGTH_PREFIX = struct.Struct("<I")
# The V2 protocol's raw contents are little-endian, whatever the host.
_RAW_DTYPES = {name: np.dtype(kind).newbyteorder("<") for name, kind in V2_TO_NUMPY.items() if name != BYTES}

# The V2 system shared-memory extension: a tensor's parameters naming where its bytes lie instead of carrying them.
REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"
PARAMETERS = (REGION, OFFSET, BYTE_SIZE)

# Triton's binary tensor extension for REST: the length of the JSON header that starts the body, each binary
# tensor's byte count in its parameters, and the request parameter asking for every output in binary.
BINARY_HEADER = "Inference-Header-Content-Length"
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA_OUTPUT = "binary_data_output"


class TensorError(ValueError):
    """The tensor's data does not match its declared datatype or shape; the message says what to send."""


@dataclass(frozen=True)
class Location:
    """Where one tensor lies: `byte_size` bytes at `offset` into a registered shared-memory region."""

    region: str
    offset: int
    byte_size: int


def v2_datatype(array: np.ndarray) -> str:
    """The V2 datatype that carries this array (str, bytes and object arrays are BYTES)."""
    if array.dtype.kind in "OSU":
        return BYTES
    try:
        return NUMPY_TO_V2[array.dtype]
    except KeyError:
        raise TensorError(
            f"arrays of dtype {array.dtype} have no V2 datatype; send one of {sorted(NUMPY_TO_V2.values())} or BYTES"
        ) from None


def element_count(shape: Iterable[int], name: str) -> int:
    """The number of elements a declared shape holds; negative dimensions are refused."""
    dims = list(shape)
    if any(dim < 0 for dim in dims):
        raise TensorError(f"input {name!r}: shape {dims} has a negative dimension; send sizes >= 0")
    return math.prod(dims)


def from_raw(raw: bytes | memoryview, datatype: str, shape: list[int], name: str) -> np.ndarray:
    """Raw contents (gRPC `raw_input_contents`) as a flat array: a view for numbers, no copy."""
    count = element_count(shape, name)
    if datatype == BYTES:
        items = unpack_bytes(raw, name)
        if len(items) != count:
            raise TensorError(
                f"input {name!r}: raw contents hold {len(items)} BYTES elements but shape {list(shape)} needs {count}"
            )
        array = np.empty(count, dtype=object)
        array[:] = items
        return array
    dtype = _RAW_DTYPES.get(datatype)
    if dtype is None:
        raise TensorError(f"input {name!r}: unknown datatype {datatype!r}; use one of {sorted(V2_TO_NUMPY)}")
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise TensorError(
            f"input {name!r}: raw contents hold {len(raw)} bytes but shape {list(shape)} of {datatype} "
            f"needs {expected} ({count} x {dtype.itemsize} bytes)"
        )
    array = np.frombuffer(raw, dtype=dtype)
    if datatype == "BOOL":
        _check_bool_bytes(array, name)
    return array


def _check_bool_bytes(array: np.ndarray, name: str) -> None:
    """NumPy views any byte as a bool, but ONNX Runtime passes the byte itself on: only 0 and 1 are booleans."""
    codes = array.view(np.uint8)
    wrong = np.flatnonzero(codes > 1)
    if wrong.size:
        raise TensorError(
            f"input {name!r}: BOOL raw contents must be bytes 0 (false) or 1 (true); element {wrong[0]} is "
            f"{codes[wrong[0]]} ({wrong.size} such elements)"
        )


def unpack_bytes(raw: bytes | memoryview, name: str) -> list[bytes]:
    """Split length-prefixed BYTES raw contents (4-byte little-endian length, then the bytes)."""
    view = memoryview(raw)
    items, offset = [], 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise TensorError(f"input {name!r}: BYTES raw contents end inside a 4-byte length prefix (truncated)")
        (size,) = _LENGTH_PREFIX.unpack_from(view, offset)
        offset += 4
        if offset + size > len(view):
            raise TensorError(
                f"input {name!r}: a BYTES element declares {size} bytes but only {len(view) - offset} remain (truncated)"
            )
        items.append(bytes(view[offset : offset + size]))
        offset += size
    return items


def pack_bytes(items: Iterable[object]) -> bytes:
    """Length-prefixed BYTES raw contents, the inverse of `unpack_bytes` (anything not bytes goes as its text)."""
    parts = []
    for item in items:
        data = bytes(item) if isinstance(item, (bytes, bytearray, memoryview)) else str(item).encode()
        parts += [_LENGTH_PREFIX.pack(len(data)), data]
    return b"".join(parts)


def to_raw(array: np.ndarray, datatype: str) -> bytes:
    """An array as V2 raw contents (little-endian; BYTES length-prefixed)."""
    if datatype == BYTES:
        return pack_bytes(np.asarray(array, dtype=object).ravel())
    return np.ascontiguousarray(array, dtype=_RAW_DTYPES[datatype]).tobytes()
