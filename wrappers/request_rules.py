"""The runtime's rules for what a request holds, as functions of arrays and errors alone (no model, no server).

They decide what a client is told: rows that disagree between inputs, bytes that are not text for a graph
that takes strings, a shape said the way the model advertises it (`N` for any size), and ONNX Runtime's
own message without the source files and checks it names, which a client cannot act on.
"""

from __future__ import annotations

import re

import numpy as np
from mlserver.errors import InferenceError

# ONNX Runtime's messages name its sources ("/onnxruntime_src/...reshape_helper.h:84 onnxruntime::...(...)")
# and the check that failed ("size != 0 && ... was false."): internals a client cannot act on.
_ORT_STATUS = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_SOURCE = re.compile(r"\S+\.(?:h|hpp|cc|cpp|cu):\d+ [^(\n]*\([^)\n]*\)(?:[^\n]*? was false\.)?\s*")


def rows(arrays: dict[str, np.ndarray]) -> int:
    """The row count (first dimension) all inputs share; HTTP 400 naming each input's where they differ."""
    counts = {name: (array.shape[0] if array.ndim else 1) for name, array in arrays.items()}
    if len(set(counts.values())) > 1:
        raise InferenceError(f"inputs must have the same number of rows (first dimension), got {counts}")
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
                raise InferenceError(
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
