"""REST bodies as JSON, parsed by simdjson where installed, orjson otherwise; every malformed body a JSONDecodeError.

A 224x224x3 image sent as V2 JSON is 150,528 numbers, about 3 MB of text; `fastsimdjson` (simdjson's own
Python binding) parses it into the same Python objects about 1.6x faster than orjson, MLServer's parser.
What simdjson refuses is handed to `json.loads`, so bodies parse exactly as before. `json.loads` refuses
three kinds of body with errors other than its JSONDecodeError (invalid UTF-8, nesting deeper than Python's
recursion limit, an integer over Python's 4300 digits): those become JSONDecodeErrors too, saying what was
wrong. No MLServer import: `wrappers.transport.rest_json` puts `parse` into MLServer's requests; the fast REST route,
the binary extension and the shared-memory endpoints parse their bodies with it alike.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import orjson

from slipway.v2_wire import REGION

try:
    import fastsimdjson
except ImportError:  # an optional speed-up: orjson parses instead, as in MLServer
    fastsimdjson = None


def parse(body: bytes, *, empty_data_for: tuple[str, ...] = (REGION,)) -> Any:
    """A REST body as a Python object (`json.JSONDecodeError` where it is not JSON). Inputs without `data` whose
    parameters name one of `empty_data_for` (their data lies elsewhere) get an empty `data`, which MLServer's schema
    needs."""
    parsed = loads(body)
    inputs = parsed.get("inputs") if isinstance(parsed, dict) else None
    for tensor in inputs if isinstance(inputs, list) else []:
        parameters = tensor.get("parameters") if isinstance(tensor, dict) else None
        if isinstance(parameters, dict) and "data" not in tensor and any(key in parameters for key in empty_data_for):
            tensor["data"] = []
    return parsed


def loads(body: bytes) -> Any:
    """The body's JSON; `json.JSONDecodeError` saying what is wrong, whatever the reason it is not JSON."""
    try:
        return fastsimdjson.loads(body) if fastsimdjson else orjson.loads(body)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(
            "the JSON is nested too deeply for this server to parse (more than about 1000 levels of [ and {); "
            "a V2 request needs a few: send each tensor's data as one flat list",
            "",
            0,
        ) from None
    except UnicodeDecodeError as err:
        raise _not_utf8(body, err) from None
    except ValueError as err:  # what else json.loads raises: an integer too long to convert
        raise _too_many_digits(body, err) from None


def _not_utf8(body: bytes, err: UnicodeDecodeError) -> json.JSONDecodeError:
    try:  # json.loads guesses UTF-16 or -32 from the first bytes: say where UTF-8 breaks, what JSON over HTTP is
        bytes(body).decode("utf-8")
    except UnicodeDecodeError as utf8:
        err = utf8
    return json.JSONDecodeError(
        f"the body is not {err.encoding.upper()} at byte {err.start} (0x{err.object[err.start]:02x}): {err.reason}; "
        "send JSON encoded as UTF-8",
        "",
        err.start,
    )


def _too_many_digits(body: bytes, err: ValueError) -> json.JSONDecodeError:
    limit = sys.get_int_max_str_digits()
    digits = re.search(rb"[0-9]{%d}" % (limit + 1), body) if limit else None
    if digits is None:
        return json.JSONDecodeError(str(err), "", 0)
    return json.JSONDecodeError(
        f"a number has more than {limit} digits, more than this server reads and than any V2 datatype holds; "
        "send numbers that fit the tensor's datatype",
        "",
        digits.start(),
    )
