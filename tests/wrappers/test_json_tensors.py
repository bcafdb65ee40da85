"""Large V2 JSON bodies a piece at a time (`wrappers.transport.json_tensors`): the same request as parsing them
whole, the floats as arrays, what whole parsing refuses refused; answers encoded to the same bytes as whole."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from slipway.v2_wire import V2_TO_NUMPY, TensorError
from wrappers.protocol.json_parsing import parse
from wrappers.transport import json_tensors


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    monkeypatch.setattr(json_tensors, "PIECE_BYTES", 64)  # bodies of a few hundred bytes cross many pieces
    monkeypatch.setattr(json_tensors, "PIECE_VALUES", 7)


@pytest.fixture(autouse=True, params=["simdjson", "objects"])
def numbers_parsed_by(request, monkeypatch):
    """Each test with pysimdjson copying numbers into C, and without it (numbers as Python objects first)."""
    if request.param == "simdjson":
        assert json_tensors.simdjson is not None, "pysimdjson is in the serve extra: `make setup` installs it"
    else:
        monkeypatch.setattr(json_tensors, "simdjson", None)
    return request.param


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
    "data, datatype, taken",
    [
        (NUMBERS, "FP32", True),
        (INTEGERS, "INT8", True),
        (INTEGERS.replace("-", ""), "UINT8", True),
        (INTEGERS.replace(", 7,", ", 7.0,"), "INT64", False),
        (INTEGERS.replace(", 7,", ", 128,"), "INT8", False),
        (INTEGERS.replace(", 7,", ", -1,"), "UINT16", False),
        (INTEGERS.replace(", 7,", f", {2**63},"), "INT64", False),
        (NUMBERS.replace(", 7,", ", null,"), "FP32", False),
        (NUMBERS.replace(", 7,", ", NaN,"), "FP32", False),
        (NUMBERS.replace("]", ",]"), "FP32", False),
    ],
)
def test_simdjson_copies_numbers_that_fit_and_leaves_the_rest_to_the_objects_path(data, datatype, taken, numbers_parsed_by):
    span = data.strip()[1:-1].encode()
    dtype = np.dtype(V2_TO_NUMPY[datatype])
    copied = json_tensors._numbers_in_c(span, dtype)
    if numbers_parsed_by == "objects" or not taken:
        assert copied is None
        return
    assert copied is not None and copied.dtype == dtype
    np.testing.assert_array_equal(copied, np.asarray(json.loads(data), dtype=dtype))


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


WORDS = ["", "café", 'a "quoted" word', "back\\slash", "\\", '\\"', "日本語", "😀", "a,b]", '"],["', "{x}", "tab\there", "\n"]


def _strings_request(values: list, shape: list[int] | None = None, ensure_ascii: bool = True, indent: int | None = None) -> bytes:
    tensor = {"name": "x", "datatype": "BYTES", "shape": shape or [len(values)], "data": values}
    return json.dumps({"id": "r-1", "inputs": [tensor]}, ensure_ascii=ensure_ascii, indent=indent).encode()


@pytest.mark.parametrize("ensure_ascii", [True, False], ids=["escaped", "utf-8"])  # \u00e9 or é in the body
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
def test_a_long_list_of_strings_becomes_an_object_array_of_the_same_str_as_whole_parsing(ensure_ascii, indent):
    values = WORDS * 20
    body = _strings_request(values, ensure_ascii=ensure_ascii, indent=indent)
    document, arrays = json_tensors.parse_large(body, parse)
    whole = parse(body)
    assert list(arrays) == [0] and arrays[0].dtype == object and arrays[0].shape == (len(values),)
    assert arrays[0].tolist() == whole["inputs"][0].pop("data") == values
    assert all(type(value) is str for value in arrays[0])  # what ONNX Runtime takes for a string tensor
    assert document["inputs"][0].pop("data") == [] and document == whole


def test_strings_fill_the_count_a_shape_of_several_dimensions_holds():
    values = [f"w{i}" for i in range(60)]
    document, arrays = json_tensors.parse_large(_strings_request(values, shape=[3, 20]), parse)
    assert arrays[0].tolist() == values  # flat, row-major: the runtime reshapes it


def test_one_string_longer_than_a_piece_and_escapes_across_piece_ends_parse_as_whole():
    values = ["x" * 500, '\\"' * 100, "\\" * 99 + '"', "é" * 70, ""]
    body = _strings_request(values)
    document, arrays = json_tensors.parse_large(body, parse)
    assert arrays[0].tolist() == values == parse(body)["inputs"][0]["data"]


@pytest.mark.parametrize(
    "values, shape, message",
    [
        (WORDS * 10 + [7], None, "input 'x': BYTES data must be strings"),
        (WORDS * 10 + [None], None, "input 'x': BYTES data must be strings"),
        (
            WORDS * 10,
            [len(WORDS) * 10 + 1],
            r"input 'x': data holds 130 values, which does not fill shape \[131\] exactly \(131 needed\); "
            "send one value per element, row-major",
        ),
        (WORDS * 10, [len(WORDS) * 10 - 1], r"data holds 130 values, which does not fill shape \[129\] exactly"),
        (WORDS * 10, [10**6, 10**6], r"data holds 130 values, which does not fill shape \[1000000, 1000000\] exactly"),
    ],
    ids=["a-number", "a-null", "too-few", "too-many", "far-too-few"],  # far too few: nothing of that count allocated
)
def test_strings_that_do_not_fit_their_input_are_refused_naming_what_to_send(values, shape, message):
    with pytest.raises(TensorError, match=message):
        json_tensors.parse_large(_strings_request(values, shape=shape), parse)


@pytest.mark.parametrize(
    "wrong, right",
    [
        ('"w9"]', '"w9",]'),  # a comma after the last string
        ('"w3", "w4"', '"w3" "w4"'),  # no comma between two
        ('"w3", "w4"', '"w3",, "w4"'),  # an empty value
        ('"w3"', '"w\\x3"'),  # not a JSON escape
    ],
    ids=["trailing-comma", "no-comma", "empty-value", "bad-escape"],
)
def test_a_list_of_strings_whole_parsing_refuses_is_refused(wrong, right):
    body = _strings_request([f"w{i % 10}" for i in range(100)]).decode()
    body = (body.replace(wrong, right) if wrong.endswith("]") else body.replace(wrong, right, 1)).encode()
    with pytest.raises(ValueError):
        parse(body)
    with pytest.raises(ValueError) as refused:
        json_tensors.parse_large(body, parse)
    assert not isinstance(refused.value, TensorError)  # refused as JSON, before its count is checked


def test_invalid_utf8_in_a_string_is_refused_as_whole_parsing_refuses_it():
    body = _strings_request(WORDS * 10).replace(b"back", b"b\xffck", 1)
    with pytest.raises(ValueError, match="not UTF-8"):
        parse(body)
    with pytest.raises(ValueError, match="not UTF-8"):
        json_tensors.parse_large(body, parse)


@pytest.mark.parametrize(
    "tensor",
    [
        {"datatype": "FP32", "shape": [130]},  # strings for numbers: the runtime refuses them as any list
        {"datatype": "BYTES", "shape": [-1]},  # a shape the runtime refuses
        {"datatype": "BYTES", "shape": "130"},
    ],
)
def test_strings_for_another_datatype_or_shape_are_parsed_as_whole(tensor):
    body = json.dumps({"inputs": [{"name": "x", **tensor, "data": WORDS * 10}]}).encode()
    document, arrays = json_tensors.parse_large(body, parse)
    assert arrays == {} and document == parse(body)


def test_lists_of_strings_past_the_scans_a_body_is_allowed_are_parsed_as_whole():
    """Each list of strings that may be long costs a scan: a body of many is bounded, the rest parse as before."""
    values = WORDS * 10
    tensors = [
        {"name": f"x{i}", "datatype": "BYTES", "shape": [len(values)], "data": values}
        for i in range(json_tensors.STRING_SCANS + 2)
    ]
    body = json.dumps({"inputs": [{"name": "s", "datatype": "BYTES", "shape": [1], "data": ["a"]}, *tensors]}).encode()
    document, arrays = json_tensors.parse_large(body, parse)
    assert sorted(arrays) == list(range(1, json_tensors.STRING_SCANS + 1))  # the short one needed no scan
    assert all(arrays[index].tolist() == values for index in arrays)
    assert [tensor["data"] for tensor in document["inputs"][json_tensors.STRING_SCANS + 1 :]] == [values, values]
