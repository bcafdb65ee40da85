"""The runtime's rules for what a request holds, as functions of names, shapes and arrays (no model, no server).

They decide what a client is told: inputs missing, unknown or repeated, a datatype or shape other than the
advertised one, too many rows or none, data that does not fill its shape, NaN where finite numbers are
required, rows that disagree between inputs, bytes that are not text for a graph that takes strings,
unknown outputs, a shape said the way the model advertises it (`N` for any size), and ONNX Runtime's own
message without the source files and checks it names, which a client cannot act on. Each refusal is a
`RequestError` (bad data itself a `TensorError`) that the runtime answers with HTTP 400 (gRPC INVALID_ARGUMENT);
no MLServer import, so the rules are tested on their own.
"""

from __future__ import annotations

import re
from collections.abc import Set
from typing import TYPE_CHECKING

import numpy as np

from slipway.v2_wire import TensorError, element_count

if TYPE_CHECKING:
    from engine.tensor_specs import TensorSpec

# ONNX Runtime's messages name its sources ("/onnxruntime_src/...reshape_helper.h:84 onnxruntime::...(...)")
# and the check that failed ("size != 0 && ... was false."): internals a client cannot act on.
_ORT_STATUS = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_SOURCE = re.compile(r"\S+\.(?:h|hpp|cc|cpp|cu):\d+ [^(\n]*\([^)\n]*\)(?:[^\n]*? was false\.)?\s*")


class RequestError(ValueError):
    """The request does not fit the model; the message says what to send instead (HTTP 400)."""


# A request's id goes back to the client in the answer and, through MLServer's CloudEvents headers (Ce-Id) and gRPC
# metadata, into HTTP headers: a short token of printable ASCII without spaces (a UUID, a trace id) fits every one.
REQUEST_ID_MAX = 128
_REQUEST_ID = re.compile(rf"[\x21-\x7e]{{1,{REQUEST_ID_MAX}}}")


def check_request_id(request_id: str | None) -> None:
    """RequestError unless the id is absent or empty (gRPC's unset string; the server makes one) or a token
    `_REQUEST_ID` allows: never echoed raw."""
    if not request_id or _REQUEST_ID.fullmatch(request_id):
        return
    shown = repr(request_id[:40]) + ("..." if len(request_id) > 40 else "")
    raise RequestError(
        f"request id {shown} ({len(request_id)} characters) is not a token the answer can carry: send "
        f"1-{REQUEST_ID_MAX} printable ASCII characters without spaces (a UUID, say), or no id and the "
        "server makes one"
    )


def rows(arrays: dict[str, np.ndarray]) -> int:
    """The row count (first dimension) all inputs share; RequestError naming each input's where they differ."""
    counts = {name: (array.shape[0] if array.ndim else 1) for name, array in arrays.items()}
    if len(set(counts.values())) > 1:
        raise RequestError(f"inputs must have the same number of rows (first dimension), got {counts}")
    return next(iter(counts.values()))


def as_text(flat: np.ndarray, name: str) -> np.ndarray:
    """BYTES elements for a graph's string input as str: ONNX Runtime feeds it each bytes item's repr ("b'abc'").

    Raw gRPC contents, Triton's binary extension and typed `bytes_contents` carry bytes; JSON carries str.
    """
    text = np.empty(flat.size, dtype=object)
    for index, item in enumerate(flat.ravel()):
        if isinstance(item, bytes):
            try:
                item = item.decode()
            except UnicodeDecodeError as err:
                raise RequestError(
                    f"input {name!r}: element {index} is not UTF-8 text ({err.reason} at byte {err.start}), "
                    "and the graph takes strings; send UTF-8 text"
                ) from None
        text[index] = item
    return text


def ort_message(err: Exception) -> str:
    """ONNX Runtime's message without its status prefix and the source lines it names."""
    text = _ORT_SOURCE.sub("", _ORT_STATUS.sub("", str(err).strip()))
    return " ".join(text.split())


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as the model advertises it: [N, 8, 8, 1] (N: any size)."""
    text = "[" + ", ".join("N" if dim == -1 else str(dim) for dim in shape) + "]"
    return text + " (N: any size)" if -1 in shape else text


def check_input_names(model: str, names: list[str], expected: Set[str]) -> None:
    """Each of the model's inputs exactly once, no other; RequestError naming them where not."""
    if len(names) == len(expected) and set(names) == expected:
        return
    ordered = sorted(expected)
    unknown = sorted(set(names) - expected)
    missing = sorted(expected - set(names))
    if unknown or missing or len(names) != len(set(names)):
        raise RequestError(
            f"model {model} takes inputs {ordered}, got {names}: "
            f"send each of {ordered} exactly once" + (f" (unknown: {unknown})" if unknown else "")
        )


def check_header(spec: TensorSpec, datatype: str, shape: tuple[int, ...], row_limit: int) -> None:
    """An input's datatype and shape as the model advertises them, and 1 to `row_limit` rows."""
    if datatype != spec.datatype:
        raise RequestError(f"input {spec.name!r} must have datatype {spec.datatype}, got {datatype}")
    if not spec.accepts_shape(shape):
        raise RequestError(f"input {spec.name!r} must have shape {shape_text(spec.shape)}, got {list(shape)}")
    if shape and shape[0] > row_limit:
        raise RequestError(
            f"input {spec.name!r} has {shape[0]} rows, over this model's limit of {row_limit}; "
            "split the request (or raise parameters.extra.max_request_rows)"
        )
    if shape and shape[0] == 0:
        raise RequestError(f"input {spec.name!r} has 0 rows (shape {list(shape)}); send at least one row")


def check_filled(size: int, shape: tuple[int, ...], name: str) -> None:
    """Data of exactly the shape's element count (merged arrays: each was checked, their sum not yet)."""
    needed = element_count(shape, name)
    if size != needed:
        raise TensorError(
            f"input {name!r}: data holds {size} values, which does not fill shape {list(shape)} exactly ({needed} needed)"
        )


def check_finite(flat: np.ndarray, name: str) -> None:
    """Floating-point input without NaN or infinities (for `reject_non_finite`)."""
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        raise RequestError(
            f"input {name!r} holds NaN or infinite values; send finite numbers (or set parameters.extra.reject_non_finite=false)"
        )


def requested_outputs(model: str, wanted: list[str], names: list[str]) -> list[str]:
    """The outputs a request asks for (all of the model's when it names none); RequestError for unknown ones."""
    if not wanted:
        return list(names)
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise RequestError(f"model {model} has outputs {names}; unknown outputs requested: {unknown}")
    return wanted
