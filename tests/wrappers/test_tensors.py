"""V2 tensor data <-> NumPy: exact round trips, and every malformed payload named, never a crash."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from slipway.v2_wire import V2_TO_NUMPY, TensorError, from_raw, pack_bytes, to_raw, unpack_bytes
from wrappers.protocol.tensors import from_json

NUMERIC = sorted(name for name in V2_TO_NUMPY if name != "BYTES")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(
    st.sampled_from(NUMERIC).flatmap(
        lambda datatype: st.tuples(
            st.just(datatype),
            hnp.arrays(
                V2_TO_NUMPY[datatype],
                hnp.array_shapes(min_dims=1, max_dims=3, max_side=5),
                elements={"allow_nan": False} if datatype.startswith("FP") else None,
            ),
        )
    )
)
def test_raw_and_json_round_trip_every_numeric_datatype(case):
    datatype, array = case
    raw = to_raw(array, datatype)
    np.testing.assert_array_equal(from_raw(raw, datatype, list(array.shape), "x"), array.ravel())
    decoded = from_json(array.tolist(), datatype, list(array.shape), "x")
    assert decoded.dtype == V2_TO_NUMPY[datatype]
    np.testing.assert_array_equal(decoded, array.ravel())


def test_raw_contents_are_read_little_endian_without_copy():
    raw = np.arange(6, dtype="<f4").tobytes()
    array = from_raw(raw, "FP32", [2, 3], "x")
    assert array.base is not None and not array.flags.writeable  # a view on the request's bytes
    assert array.tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "raw, datatype, shape, message",
    [
        (b"\0" * 10, "FP32", [1, 3], "raw contents hold 10 bytes but shape [1, 3] of FP32 needs 12"),
        (b"\0" * 8, "FP32", [-1, 2], "negative dimension"),
        (b"", "FP32", [10**12, 1000], "needs 4000000000000000 (1000000000000000 x 4 bytes)"),
        (b"\0" * 4, "COMPLEX", [1], "unknown datatype 'COMPLEX'"),
        (b"\3\0\0", "BYTES", [1], "end inside a 4-byte length prefix"),
        (b"\5\0\0\0abc", "BYTES", [1], "declares 5 bytes but only 3 remain"),
        (pack_bytes([b"a", b"b"]), "BYTES", [3], "hold 2 BYTES elements but shape [3] needs 3"),
        # NumPy would view any byte as True; ONNX Runtime would pass the 7 on to the graph.
        (b"\0\1\7", "BOOL", [3], "BOOL raw contents must be bytes 0 (false) or 1 (true); element 2 is 7"),
    ],
)
def test_malformed_raw_contents_are_named(raw, datatype, shape, message):
    with pytest.raises(TensorError, match=re.escape(message)):
        from_raw(raw, datatype, shape, "x")


@pytest.mark.parametrize(
    "data, datatype, shape, message",
    [
        (["1.5"], "FP32", [1], "FP32 data must be numbers, got str"),
        ([None], "FP32", [1], "got NoneType"),
        ([1.5], "INT32", [1], "must be integers, got float"),
        ([1, [2]], "FP32", [2], "must be numbers, got list"),
        ([300], "INT8", [1], "must fit INT8"),
        ([-1], "UINT64", [1], "must fit UINT64"),
        ([1e300], "FP32", [1], "must fit FP32 (magnitudes up to 3.403e+38)"),
        ([70000.0], "FP16", [1], "must fit FP16"),
        ([10**400], "FP32", [1], "FP32 data must be numbers, got an integer too large for a float"),
        ([1, 0], "BOOL", [2], "true/false"),
        ([1.0, 2.0], "FP32", [3], "holds 2 values, which does not fill shape [3] exactly (3 needed)"),
        ([[1.0], [2.0, 3.0]], "FP32", [3], "ragged"),
        ([[1.0], [[2.0]]], "FP32", [2], "ragged"),
        ([1, {"a": 1}], "BYTES", [2], "BYTES data must be strings"),
        (["a"], "BYTES", [2], "holds 1 values, which does not fill shape [2]"),
    ],
)
def test_malformed_json_data_is_named(data, datatype, shape, message):
    with pytest.raises(TensorError) as caught:
        from_json(data, datatype, shape, "x")
    assert message in str(caught.value) and "input 'x'" in str(caught.value)


def test_nested_json_is_flattened_row_major():
    assert from_json([[1, 2], [3, 4]], "INT16", [2, 2], "x").tolist() == [1, 2, 3, 4]
    assert from_json([["a", "b"], ["c", "d"]], "BYTES", [2, 2], "s").tolist() == ["a", "b", "c", "d"]


@FAST
@given(st.lists(st.binary(max_size=20), max_size=6))
def test_bytes_pack_and_unpack_are_inverse(items):
    assert unpack_bytes(pack_bytes(items), "x") == items


@FAST
@given(
    st.binary(max_size=64),
    st.sampled_from(sorted(V2_TO_NUMPY)),
    st.lists(st.integers(-2, 40), max_size=3),
)
def test_arbitrary_raw_bytes_either_decode_or_raise_tensor_error(raw, datatype, shape):
    try:
        array = from_raw(raw, datatype, shape, "x")
    except TensorError as err:
        assert "input 'x'" in str(err)
    else:
        assert array.size == int(np.prod(shape))
        if datatype == "BOOL":
            assert set(array.view(np.uint8).tolist()) <= {0, 1}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3),
    lambda children: st.lists(children, max_size=4),
    max_leaves=12,
)


@FAST
@given(json_values, st.sampled_from(sorted(V2_TO_NUMPY)), st.lists(st.integers(0, 4), max_size=3))
def test_arbitrary_json_either_decodes_to_the_declared_type_or_raises_tensor_error(data, datatype, shape):
    try:
        array = from_json(data, datatype, shape, "x")
    except TensorError as err:
        assert "input 'x'" in str(err)
    else:
        assert array.dtype == V2_TO_NUMPY[datatype] and array.size == int(np.prod(shape))
