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
such a list (nested lists, strings but as below, `data` elsewhere than in an input) is parsed whole, as it would be, so
the runtime's checks answer it as before.

With pysimdjson installed (the serving extras install it), simdjson first copies each piece's numbers straight into C
doubles or 64-bit integers, no Python object per value: a third of the CPU of parsing them into objects and copying
those (which had made a MobileNetV2 image's REST request cost a quarter more server CPU than parsing its body whole).
Where it does not take a piece as such numbers, the list goes the way above, with the same answer or refusal.

A BYTES input's long flat list of strings is cut out too, its end found by a scan that tells the quotes inside a
string (escaped) from those around one, a vectorised pass over the bytes; then its strings are parsed a piece at a
time (each piece ends just after a string) straight into an object array of the count its shape declares: ONNX
Runtime takes a string tensor as an array of Python str, so each string stays an object, but neither the whole
parsed list nor the parser's buffers for the whole list are ever held. A list whose count, or element, does not fit
is refused (`TensorError`) with the runtime's own words. No MLServer import: `wrappers.transport.rest_infer` calls it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from slipway.v2_wire import BYTES, V2_TO_NUMPY, TensorError, element_count

try:
    import simdjson  # pysimdjson: a flat list of numbers copied straight into C doubles or 64-bit integers
except ImportError:  # an optional speed-up: numbers are parsed into Python objects, then copied into arrays
    simdjson = None  # type: ignore[assignment]  # the module's name stands for "not installed" (mypy wants a module)

INLINE_BODY_BYTES = 256 << 10  # a JSON body up to this size is parsed whole, on the event loop: a few ms at most
PIECE_BYTES = 256 << 10  # parsed in one call: as long
PIECE_VALUES = 1 << 15  # encoded in one call, about as long
STRING_SCANS = 16  # lists of strings scanned per body at most (a V2 request has a few inputs); the others parse whole
_NONCE = os.urandom(8).hex()  # in every marker: no client writes one by chance
# the V2 datatypes whose JSON numbers parse a piece at a time into arrays (the wire's own table, split by kind)
FLOAT_DTYPES = {name: dtype for name, dtype in V2_TO_NUMPY.items() if name.startswith("FP")}
INTEGER_DTYPES = {name: dtype for name, dtype in V2_TO_NUMPY.items() if name.startswith(("INT", "UINT"))}
_KEY = b'"data"'
_WHITESPACE = (b" ", b"\t", b"\r", b"\n")
_NUMBERS = b"0123456789+-.eE \t\r\n,"  # all a flat list of JSON numbers holds
_INTEGERS = b"0123456789- \t\r\n,"  # all a flat list of JSON integers holds: no fraction, no exponent
_QUOTE, _BACKSLASH, _OPEN, _BRACE, _CLOSE = (ord(c) for c in '"\\[{]')  # `[` or `{` outside strings: nested
_C_TYPES = {"f": ("d", np.float64), "i": ("i", np.int64), "u": ("u", np.uint64)}  # by a dtype's kind: pysimdjson's
_parsers = threading.local()  # a pysimdjson parser per thread: one parses a document at a time


def parse_large(body: bytes, parse: Callable[[bytes], Any]) -> tuple[Any, dict[int, np.ndarray]]:
    """`parse(body)`, but where an input's `data` is a flat list of numbers of a float or integer datatype longer than
    PIECE_BYTES, that input's `data` is left empty and the numbers come back beside the document as an array of the
    datatype, by the input's index (validating an array as a list would walk it, holding the GIL). ValueError (a
    JSONDecodeError among them) where `parse` would refuse the body."""
    spans: dict[str, bytes] = {}
    strings: dict[str, _Strings] = {}
    skeleton: list[bytes] = []
    position = 0
    for start, end, found in _long_lists(body):
        name = marker(len(spans) + len(strings))
        if found is None:
            spans[name] = body[start + 1 : end]
        else:
            strings[name] = found
        skeleton += [body[position:start], b'"\\u0000', name[1:].encode(), b'"']  # the marker as a JSON string
        position = end + 1
    if not spans and not strings:
        return parse(body), {}
    skeleton.append(body[position:])
    document = parse(b"".join(skeleton))
    arrays: dict[int, np.ndarray] = {}
    inputs = document.get("inputs") if isinstance(document, dict) else None
    for index, tensor in enumerate(inputs if isinstance(inputs, list) else []):
        if not isinstance(tensor, dict) or not isinstance(data := tensor.get("data"), str):
            continue
        if data in strings:
            listed = strings.pop(data)
            shape = _declared_shape(tensor)
            if tensor.get("datatype") != BYTES or shape is None:  # the runtime refuses it as any JSON list
                tensor["data"] = parse(b"[" + body[listed.opening + 1 : listed.closing] + b"]")
            else:
                arrays[index], tensor["data"] = _strings(body, listed, shape, str(tensor.get("name")), parse), []
            continue
        if data not in spans:
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
    for name, listed in strings.items():  # cut out, but not an input's data
        spans[name] = body[listed.opening + 1 : listed.closing]
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
    """(start, end, None) of each `"data": [...]` list past PIECE_BYTES with no string or list in it: `[` and its `]`;
    (start, end, where its strings are) of each such list of strings alone."""
    found, scans = body.find(_KEY), 0
    while found >= 0:
        colon = _skip(body, found + len(_KEY))
        opening = _skip(body, colon + 1) if body[colon : colon + 1] == b":" else -1
        first = _skip(body, opening + 1) if opening >= 0 and body[opening : opening + 1] == b"[" else -1
        if first >= 0 and body[first : first + 1] == b'"':
            scanned = scans < STRING_SCANS and _may_be_long(body, opening)
            scans += scanned
            listed = _strings_list(body, opening) if scanned else None
            if listed is not None and listed.closing - opening > PIECE_BYTES:
                yield opening, listed.closing, listed
                found = body.find(_KEY, listed.closing)
                continue
        elif first >= 0:
            closing = body.find(b"]", opening)
            long = closing - opening > PIECE_BYTES
            if long and body.find(b"[", opening + 1, closing) < 0 and body.find(b'"', opening, closing) < 0:
                yield opening, closing, None
                found = body.find(_KEY, closing)
                continue
        found = body.find(_KEY, found + 1)


def _skip(body: bytes, position: int) -> int:
    while body[position : position + 1] in _WHITESPACE:
        position += 1
    return position


def _may_be_long(body: bytes, opening: int) -> bool:
    """False where the list of strings that opens at `opening` surely ends within PIECE_BYTES: its first `]` comes
    there, after an even number of quotes and no backslash (so outside every string). Bytes' own searches: a body of
    many short lists costs no NumPy call per list."""
    closing = body.find(b"]", opening)
    if closing < 0:  # no list: the parser refuses the body
        return False
    if closing - opening > PIECE_BYTES:
        return True
    return body.find(b"\\", opening, closing) >= 0 or body.count(b'"', opening, closing) % 2 == 1


@dataclass(frozen=True)
class _Strings:
    """A flat list of strings in a body: its `[` and `]`, and where its pieces end (just after a string's quote)."""

    opening: int
    closing: int
    cuts: tuple[int, ...]


def _strings_list(body: bytes, opening: int) -> _Strings | None:
    """The list of strings that opens at `opening`, found by a scan of PIECE_BYTES at a time: a quote is escaped where
    an odd run of backslashes comes before it, the others open and close strings in turn, and the list ends at the
    first `]` outside them. None where a `[` or `{` comes outside them first (nested), or no `]` does (the parser
    refuses such a body as it would have)."""
    view = np.frombuffer(body, dtype=np.uint8)
    quotes = 0  # unescaped quotes before `position`: odd inside a string
    run = 0  # backslashes just before `position`
    cuts: list[int] = []
    position, next_cut = opening + 1, opening + 1 + PIECE_BYTES
    while position < view.size:
        chunk = view[position : position + PIECE_BYTES]
        found = np.flatnonzero(chunk == _QUOTE)
        after = (found > 0) & (chunk[np.maximum(found - 1, 0)] == _BACKSLASH)
        if after.any() or (found.size and found[0] == 0 and run):  # a quote after a backslash: is it escaped?
            plain = np.flatnonzero(chunk != _BACKSLASH)
            last = np.searchsorted(plain, found) - 1  # the last byte before each quote that is not a backslash
            runs = np.where(last >= 0, found - 1 - plain[np.maximum(last, 0)], found + run)
            found = found[runs % 2 == 0]
        ends = np.flatnonzero(chunk == _CLOSE)
        outside = ends[(quotes + np.searchsorted(found, ends)) % 2 == 0]
        stop = int(outside[0]) if outside.size else chunk.size
        nested = np.flatnonzero((chunk[:stop] == _OPEN) | (chunk[:stop] == _BRACE))
        if ((quotes + np.searchsorted(found, nested)) % 2 == 0).any():
            return None
        shut = found[(quotes + np.arange(found.size)) % 2 == 1] + position  # the quotes that end a string, in order
        shut = shut[shut < position + stop]
        while shut.size and shut[-1] >= next_cut:  # a cut at the first string's end past each PIECE_BYTES
            cut = int(shut[np.searchsorted(shut, next_cut)]) + 1
            cuts.append(cut)
            next_cut = cut + PIECE_BYTES
        if outside.size:
            return _Strings(opening, position + stop, tuple(cuts))
        quotes += found.size
        trailing = chunk.size - len(chunk.tobytes().rstrip(b"\\"))  # backslashes at the chunk's end
        run = run + chunk.size if trailing == chunk.size else trailing
        position += chunk.size
    return None


def _declared_shape(tensor: dict) -> list[int] | None:
    """The tensor's shape; None where it is not one (the runtime says why)."""
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(type(dim) is int and dim >= 0 for dim in shape):
        return None
    return shape


def _strings(body: bytes, listed: _Strings, shape: list[int], name: str, parse: Callable[[bytes], Any]) -> np.ndarray:
    """The list's strings, parsed a piece at a time into an object array of the count `shape` holds. TensorError where
    an element is not a string or the count differs (the runtime's words); ValueError where `parse` would refuse the
    list."""
    count = element_count(shape, name)
    array = np.empty(min(count, (listed.closing - listed.opening) // 2), dtype=object)  # a string takes 2 bytes or more
    filled, start = 0, listed.opening + 1
    for number, end in enumerate((*listed.cuts, listed.closing)):
        piece = body[start:end]
        if number:  # after a cut, a comma first: "a" "b" is no list
            piece = piece.lstrip(b" \t\r\n")
            if not piece and end == listed.closing:  # the cut was after the last string
                break
            if not piece.startswith(b","):
                raise ValueError("a list of strings with two strings and no comma between them")
            piece = piece[1:]
        values = parse(b"[" + piece + b"]")
        if not values:  # a comma, then nothing: "a",]
            raise ValueError("a list of strings that ends with a comma")
        if not set(map(type, values)) <= {str}:
            raise TensorError(f"input {name!r}: BYTES data must be strings")
        if filled + len(values) <= array.size:
            array[filled : filled + len(values)] = values
        filled += len(values)
        start = end
    if filled != count:
        raise TensorError(
            f"input {name!r}: data holds {filled} values, which does not fill shape {list(shape)} exactly "
            f"({count} needed); send one value per element, row-major"
        )
    return array


def _numbers(span: bytes, dtype: Any, allowed: bytes, parse: Callable[[bytes], Any]) -> np.ndarray | list:
    """The numbers between `[` and `]` as an array, parsed a piece at a time; a list as `parse` reads it where they
    are not such numbers alone (bytes other than `allowed`: true/false, null, a fraction among integers) or do not fit
    `dtype` (an integer out of its range): the runtime checks those as any JSON list. ValueError where `parse` would
    refuse the list."""
    if (copied := _numbers_in_c(span, np.dtype(dtype))) is not None:
        return copied
    pieces: list[np.ndarray] = []
    for piece in _pieces(span):
        if piece.translate(None, allowed):  # not such numbers alone
            return parse(b"[" + span + b"]")
        values = parse(b"[" + piece + b"]")
        if not values:  # nothing between two commas, or after the last one
            raise ValueError("a list of numbers with an empty value in it")
        try:
            pieces.append(np.asarray(values, dtype=dtype))
        except OverflowError:  # an integer out of the datatype's range: the runtime says which range
            return parse(b"[" + span + b"]")
    if span.rstrip().endswith(b","):
        raise ValueError("a list of numbers that ends with a comma")
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)


def _numbers_in_c(span: bytes, dtype: np.dtype) -> np.ndarray | None:
    """The numbers between `[` and `]` as an array of `dtype`, each piece parsed by simdjson straight into C doubles or
    64-bit integers (no Python object per value: a third of the time of parsing them into objects and copying those);
    None without pysimdjson, or where a piece is not such numbers alone (true, null, a fraction or exponent among
    integers, what JSON refuses) or a value does not fit `dtype`: `_numbers` then parses them as it would have, with
    the same answer or refusal."""
    if simdjson is None:
        return None
    c_type, c_dtype = _C_TYPES[dtype.kind]
    parser = getattr(_parsers, "parser", None)
    if parser is None:
        parser = _parsers.parser = simdjson.Parser()
    pieces: list[np.ndarray] = []
    for piece in _pieces(span):
        try:
            values = np.frombuffer(_copied(parser, b"[" + piece + b"]", c_type), dtype=c_dtype)
        except (TypeError, ValueError, RuntimeError):  # simdjson's words for each of the cases above
            return None
        if not values.size or (dtype.kind != "f" and not _fits(values, dtype)):
            return None
        pieces.append(values.astype(dtype, copy=False))
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)


def _pieces(span: bytes) -> Iterator[bytes]:
    """The numbers between `[` and `]`, PIECE_BYTES or a little more at a time, each piece ending before a comma."""
    position, size = 0, len(span)
    while position < size:
        end = span.find(b",", min(size, position + PIECE_BYTES))
        end = size if end < 0 else end
        yield span[position:end]
        position = end + 1


def _copied(parser: Any, piece: bytes, c_type: str) -> Any:
    """The piece's numbers in a buffer of `c_type`. The parsed view goes before the parser's next document."""
    view = parser.parse(piece)
    try:
        return view.as_buffer(of_type=c_type)
    finally:
        del view


def _fits(values: np.ndarray, dtype: np.dtype) -> bool:
    limits = np.iinfo(dtype)
    return bool(values.min() >= limits.min and values.max() <= limits.max)


def _restored(node: Any, spans: dict[str, bytes], parse: Callable[[bytes], Any]) -> Any:
    """Lists cut out where they were not an input's `data` (a parameter named `data`, say), parsed back in place."""
    if isinstance(node, str) and node in spans:
        return parse(b"[" + spans[node] + b"]")
    if isinstance(node, dict):
        return {key: _restored(value, spans, parse) for key, value in node.items()}
    if isinstance(node, list):
        return [_restored(value, spans, parse) for value in node]
    return node
