"""Large V2 JSON bodies parsed a piece at a time, each flat list of floats or integers straight into an array.

A JSON parser builds the whole document in one call that holds the GIL throughout: on a worker thread it stalls the
event loop just as much as on the loop itself, since the loop cannot run a line of Python until the call returns.
And it builds a Python float or int per value (an object and a pointer, several times the text). Here an input's
`data` that is a flat list of numbers, of a float or integer datatype, past `PIECE_BYTES` is cut out of the body
before the rest is parsed, then parsed `PIECE_BYTES` at a time into an array of the input's datatype: between pieces
the thread runs Python again, where the event loop takes the GIL back (`sys.getswitchinterval`), and the request
holds the array (what the raw gRPC path hands the runtime), not a list. Pieces are parsed by the same parser, so a
malformed number is refused as before. A list the runtime would refuse or read leniently (an integer list holding a
fraction, an exponent, true/false or a value out of the datatype's range; true/false among floats) and what is not
such a list (nested lists, strings, `data` elsewhere than in an input) is parsed whole, as it would have been, so
the runtime's checks answer it as before. Strings stay a Python object each: ONNX Runtime takes a string tensor as
an array of them. No MLServer import: `wrappers.transport.rest_infer` calls it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from slipway.v2_wire import V2_TO_NUMPY

INLINE_BODY_BYTES = 256 << 10  # a JSON body up to this size is parsed whole, on the event loop: a few ms at most
PIECE_BYTES = 256 << 10  # parsed in one call: as long
PIECE_VALUES = 1 << 15  # encoded in one call, about as long
_NONCE = os.urandom(8).hex()  # in every marker: no client writes one by chance
# the V2 datatypes whose JSON numbers parse a piece at a time into arrays (the wire's own table, split by kind)
FLOAT_DTYPES = {name: dtype for name, dtype in V2_TO_NUMPY.items() if name.startswith("FP")}
INTEGER_DTYPES = {name: dtype for name, dtype in V2_TO_NUMPY.items() if name.startswith(("INT", "UINT"))}
_KEY = b'"data"'
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")
_NUMBERS = b"0123456789+-.eE \t\r\n,"  # all a flat list of JSON numbers holds
_INTEGERS = b"0123456789- \t\r\n,"  # all a flat list of JSON integers holds: no fraction, no exponent


def parse_large(body: bytes, parse: Callable[[bytes], Any]) -> tuple[Any, dict[int, np.ndarray]]:
    """`parse(body)`, but where an input's `data` is a flat list of numbers of a float or integer datatype longer than
    PIECE_BYTES, that input's `data` is left empty and the numbers come back beside the document as an array of the
    datatype, by the input's index (validating an array as a list would walk it, holding the GIL). ValueError (a
    JSONDecodeError among them) where `parse` would refuse the body."""
    spans: dict[str, bytes] = {}
    skeleton: list[bytes] = []
    position = 0
    for start, end in _long_lists(body):
        name = marker(len(spans))
        spans[name] = body[start + 1 : end]
        skeleton += [body[position:start], b'"\\u0000', name[1:].encode(), b'"']  # the marker as a JSON string
        position = end + 1
    if not spans:
        return parse(body), {}
    skeleton.append(body[position:])
    document = parse(b"".join(skeleton))
    arrays: dict[int, np.ndarray] = {}
    inputs = document.get("inputs") if isinstance(document, dict) else None
    for index, tensor in enumerate(inputs if isinstance(inputs, list) else []):
        if not isinstance(tensor, dict) or not isinstance(data := tensor.get("data"), str) or data not in spans:
            continue
        span, datatype = spans.pop(data), tensor.get("datatype", "")
        if datatype in FLOAT_DTYPES:
            values = _numbers(span, FLOAT_DTYPES[datatype], _NUMBERS, parse)
        elif datatype in INTEGER_DTYPES:
            values = _numbers(span, INTEGER_DTYPES[datatype], _INTEGERS, parse)
        else:
            values = parse(b"[" + span + b"]")
        if isinstance(values, np.ndarray):
            arrays[index], tensor["data"] = values, []
        else:
            tensor["data"] = values
    return (_restored(document, spans, parse) if spans else document), arrays


def marker(number: int) -> str:
    """A string that stands for a list while the rest of a document is parsed or encoded."""
    return f"\0slipway-{_NONCE}-{number}"


def encode_large(document: Any, arrays: dict[str, np.ndarray], encode: Callable[[Any], bytes]) -> bytes:
    """`encode(document)` with each marker string in it (a key of `arrays`) standing for its array as a list: the
    same bytes as the document with those lists in place, each list encoded PIECE_VALUES at a time (so the GIL is
    let go between pieces, as in parsing). `encode` writes compact JSON (no spaces), as MLServer's encoder does."""
    encoded = encode(document)
    pieces: list[bytes] = []
    position = 0
    for name, array in arrays.items():
        token = encode(name)
        found = encoded.find(token, position)
        if found < 0:
            raise ValueError("an array's marker is not in the encoded document")
        pieces += [encoded[position:found], b"["]
        flat = array.reshape(-1)
        for start in range(0, flat.size, PIECE_VALUES):
            pieces += [b"," if start else b"", encode(flat[start : start + PIECE_VALUES].tolist())[1:-1]]
        pieces.append(b"]")
        position = found + len(token)
    pieces.append(encoded[position:])
    return b"".join(pieces)


def _long_lists(body: bytes):
    """(start, end) of each `"data": [...]` list past PIECE_BYTES with no string or list in it: `[` and its `]`."""
    found = body.find(_KEY)
    while found >= 0:
        colon = _skip(body, found + len(_KEY))
        opening = _skip(body, colon + 1) if body[colon : colon + 1] == b":" else -1
        if opening >= 0 and body[opening : opening + 1] == b"[":
            closing = body.find(b"]", opening)
            long = closing - opening > PIECE_BYTES
            if long and body.find(b"[", opening + 1, closing) < 0 and body.find(b'"', opening, closing) < 0:
                yield opening, closing
                found = body.find(_KEY, closing)
                continue
        found = body.find(_KEY, found + 1)


def _skip(body: bytes, position: int) -> int:
    while body[position : position + 1] in _WHITESPACE:
        position += 1
    return position


def _numbers(span: bytes, dtype: Any, allowed: bytes, parse: Callable[[bytes], Any]) -> np.ndarray | list:
    """The numbers between `[` and `]` as an array, parsed a piece at a time; a list as `parse` reads it where they
    are not such numbers alone (bytes other than `allowed`: true/false, null, a fraction among integers) or do not fit
    `dtype` (an integer out of its range): the runtime checks those as any JSON list. ValueError where `parse` would
    refuse the list."""
    pieces: list[np.ndarray] = []
    position, size = 0, len(span)
    while position < size:
        end = span.find(b",", min(size, position + PIECE_BYTES))
        end = size if end < 0 else end
        piece = span[position:end]
        if piece.translate(None, allowed):  # not such numbers alone
            return parse(b"[" + span + b"]")
        values = parse(b"[" + piece + b"]")
        if not values:  # nothing between two commas, or after the last one
            raise ValueError("a list of numbers with an empty value in it")
        try:
            pieces.append(np.asarray(values, dtype=dtype))
        except OverflowError:  # an integer out of the datatype's range: the runtime says which range
            return parse(b"[" + span + b"]")
        position = end + 1
    if span.rstrip().endswith(b","):
        raise ValueError("a list of numbers that ends with a comma")
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)


def _restored(node: Any, spans: dict[str, bytes], parse: Callable[[bytes], Any]) -> Any:
    """Lists cut out where they were not an input's `data` (a parameter named `data`, say), parsed back in place."""
    if isinstance(node, str) and node in spans:
        return parse(b"[" + spans[node] + b"]")
    if isinstance(node, dict):
        return {key: _restored(value, spans, parse) for key, value in node.items()}
    if isinstance(node, list):
        return [_restored(value, spans, parse) for value in node]
    return node
