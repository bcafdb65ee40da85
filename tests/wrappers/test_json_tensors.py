"""Large V2 JSON bodies a piece at a time (`wrappers.transport.json_tensors`): the same request as parsing them
whole, the floats as arrays, what whole parsing refuses refused; answers encoded to the same bytes as whole."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from wrappers.protocol.json_parsing import parse
from wrappers.transport import json_tensors


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    monkeypatch.setattr(json_tensors, "PIECE_BYTES", 64)  # bodies of a few hundred bytes cross many pieces
    monkeypatch.setattr(json_tensors, "PIECE_VALUES", 7)


def _request(data: str, datatype: str = "FP32", **extra) -> bytes:
    rest = "".join(f', "{key}": {json.dumps(value)}' for key, value in extra.items())
    return f'{{"inputs": [{{"name": "x", "datatype": "{datatype}", "shape": [-1], "data": {data}}}]{rest}}}'.encode()


NUMBERS = "[" + ", ".join(f"{value!r}" for value in np.linspace(-3, 3, 101).tolist() + [1e-30, 7, -0.0, 2e4]) + "]"


@pytest.mark.parametrize("datatype, dtype", [("FP32", np.float32), ("FP64", np.float64), ("FP16", np.float16)])
def test_a_long_list_of_floats_becomes_an_array_of_its_datatype_and_the_rest_parses_as_whole(datatype, dtype):
    body = _request(NUMBERS, datatype, id="r-1", parameters={"data": [1, 2], "k": '"data": [3]'})
    document, arrays = json_tensors.parse_large(body, parse)
    whole = parse(body)
    expected = np.asarray(whole["inputs"][0].pop("data"), dtype=dtype)
    assert list(arrays) == [0] and arrays[0].dtype == dtype
    np.testing.assert_array_equal(arrays[0], expected)
    assert document["inputs"][0].pop("data") == [] and document == whole


INTEGERS = "[" + ", ".join(str(value) for value in list(range(-60, 61, 3)) + [7, -0, 127, 100, -128]) + "]"


@pytest.mark.parametrize("datatype", ["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"])
def test_a_long_list_of_integers_becomes_an_array_of_its_datatype(datatype):
    data = INTEGERS if datatype.startswith("INT") else INTEGERS.replace("-", "")  # unsigned: the same magnitudes
    body = _request(data, datatype, id="r-1")
    document, arrays = json_tensors.parse_large(body, parse)
    whole = parse(body)
    dtype = json_tensors.INTEGER_DTYPES[datatype]
    assert list(arrays) == [0] and arrays[0].dtype == dtype
    assert arrays[0].tolist() == whole["inputs"][0].pop("data")  # every value as sent
    assert document["inputs"][0].pop("data") == [] and document == whole


def test_the_widest_integers_keep_every_digit():
    values = [2**63 - 1, -(2**63), 0, 2**53 + 1] * 10
    document, arrays = json_tensors.parse_large(_request(json.dumps(values), "INT64"), parse)
    assert arrays[0].tolist() == values
    unsigned = [2**64 - 1, 2**63, 1] * 10
    document, arrays = json_tensors.parse_large(_request(json.dumps(unsigned), "UINT64"), parse)
    assert arrays[0].dtype == np.uint64 and arrays[0].tolist() == unsigned


@pytest.mark.parametrize(
    "data, datatype",
    [
        (NUMBERS, "INT64"),  # fractions among integers are checked as a list, by the runtime
        (INTEGERS.replace(", 7,", ", 7.0,"), "INT64"),  # even a whole one
        (INTEGERS.replace(", 7,", ", 7e0,"), "INT64"),
        (INTEGERS.replace(", 7,", ", true,"), "INT32"),  # so are booleans among integers
        (INTEGERS.replace(", 7,", ", null,"), "INT32"),
        (INTEGERS.replace(", 7,", ", 128,"), "INT8"),  # and a value out of the datatype's range
        (INTEGERS.replace(", 7,", ", -1,"), "UINT64"),
        (INTEGERS.replace(", 7,", f", {2**64},"), "UINT64"),
        (NUMBERS.replace(", 7,", ", true,"), "FP32"),  # so are booleans among floats
        ("[" + ", ".join(["[1.5, 2.5]"] * 40) + "]", "FP32"),  # nested
        ("[" + ", ".join(['"a,b]"'] * 40) + "]", "BYTES"),  # strings, one with a bracket
        ("[1.5, 2.5]", "FP32"),  # short
    ],
)
def test_lists_that_are_not_long_flat_floats_are_parsed_as_whole(data, datatype):
    body = _request(data, datatype, parameters={"data": json.loads(NUMBERS)})  # a long `data` outside the inputs
    document, arrays = json_tensors.parse_large(body, parse)
    assert arrays == {} and document == parse(body)


@pytest.mark.parametrize(
    "data",
    [
        NUMBERS.replace(", 7,", ", 7,,"),
        NUMBERS.replace("]", ",]"),
        NUMBERS.replace(", 7,", ", 7 8,"),
        NUMBERS.replace(", 7,", ", 07,"),
        NUMBERS.replace(", 7,", ", +7,"),
        NUMBERS.replace(", 7,", ", .7,"),
    ],
    ids=["empty-value", "trailing-comma", "two-numbers-no-comma", "leading-zero", "plus", "no-integer-part"],
)
def test_what_whole_parsing_refuses_is_refused(data):
    body = _request(data)
    with pytest.raises(ValueError):
        parse(body)
    with pytest.raises(ValueError):
        json_tensors.parse_large(body, parse)


@pytest.mark.parametrize("encode", [orjson.dumps, lambda value: json.dumps(value, separators=(",", ":")).encode()])
def test_arrays_are_encoded_to_the_same_bytes_as_their_lists(encode):
    first, second = np.linspace(0, 1, 50, dtype=np.float32), np.arange(23, dtype=np.int64).reshape(23, 1)
    names = [json_tensors.marker(0), json_tensors.marker(1)]
    document = {"outputs": [{"name": "a", "data": names[0]}, {"name": "b", "data": names[1], "shape": [23, 1]}]}
    as_lists = {
        "outputs": [{"name": "a", "data": first.tolist()}, {"name": "b", "data": second.ravel().tolist(), "shape": [23, 1]}]
    }
    assert json_tensors.encode_large(document, dict(zip(names, [first, second])), encode) == encode(as_lists)
