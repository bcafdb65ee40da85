"""Every V2 datatype in and out of a real MLServer: typed gRPC contents, raw gRPC contents, REST JSON and tritonclient.

Each datatype has its own Identity model, so what comes back must be exactly what was sent, bit for bit,
in the field the datatype travels in. Data in the wrong field or out of the datatype's range is refused
with INVALID_ARGUMENT (REST: 400) naming the input, the datatype and what to send, never served as read.
"""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from tritonclient.grpc import service_pb2

from slipway.local_server import LocalServer
from slipway.v2_wire import V2_TO_NUMPY, to_raw, unpack_bytes
from tests.graphs import identity_graph
from tests.wrappers.folders import model_folder
from tests.wrappers.v2 import error_text, post, raw_request
from wrappers.transport.json_tensors import INLINE_BODY_BYTES

pytestmark = pytest.mark.slow
ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
# The typed contents field of each datatype, as Triton has them; FP16 has none (raw only).
FIELDS = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP16": None,
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
TYPED = [datatype for datatype, field in FIELDS.items() if field]
# A value each field takes, to put in a field the datatype does not travel in; in the protobuf's field order.
# What each typed field can carry, as the protobuf lets a client put it there.
FIELD_VALUES = {
    "bool_contents": st.booleans(),
    "int_contents": st.integers(-(2**31), 2**31 - 1),
    "int64_contents": st.integers(-(2**63), 2**63 - 1),
    "uint_contents": st.integers(0, 2**32 - 1),
    "uint64_contents": st.integers(0, 2**64 - 1),
    "fp32_contents": st.floats(width=32),
    "fp64_contents": st.floats(),
    "bytes_contents": st.binary(max_size=6),
}
SAMPLES = {
    "bool_contents": True,
    "int_contents": 1,
    "int64_contents": 1,
    "uint_contents": 1,
    "uint64_contents": 1,
    "fp32_contents": 1.5,
    "fp64_contents": 1.5,
    "bytes_contents": b"1",
}


def values(datatype: str) -> np.ndarray:
    """The datatype's extremes and a few values that lose something if converted through another type."""
    if datatype == "BOOL":
        return np.array([True, False, False, True])
    if datatype == "BYTES":
        return np.array([b"a", "é".encode(), b"", b"x y"], dtype=object)
    dtype = np.dtype(V2_TO_NUMPY[datatype])
    if dtype.kind == "f":
        info = np.finfo(dtype)
        return np.array([info.min, info.max, 1 / 3, -0.0, info.smallest_subnormal], dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, 0, info.max - 1, info.min + 1], dtype=dtype)


def assert_exact(got: np.ndarray, sent: np.ndarray) -> None:
    """The same elements, bit for bit (-0.0 is not 0.0), of the same type."""
    if sent.dtype == object:
        assert [bytes(item) for item in got.ravel()] == sent.tolist()
    else:
        assert got.dtype == sent.dtype and got.tobytes() == sent.tobytes(), (got, sent)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("repository")
    graphs = tmp_path_factory.mktemp("graphs")
    for datatype, onnx_type in ONNX_TYPES.items():
        graph = identity_graph(graphs / f"{datatype}.onnx", onnx_type)
        model_folder(root, datatype.lower(), graph, extra={"max_request_rows": 1 << 17})  # a large JSON body's rows
    with LocalServer(root) as running:
        yield running


def typed_request(datatype: str, field: str, data: list) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=datatype.lower())
    tensor = request.inputs.add(name="x", datatype=datatype)
    tensor.shape.append(len(data))
    getattr(tensor.contents, field).extend(data)
    return request


def refused(client, request) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        client.infer(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return caught.value.details()


@pytest.mark.parametrize("datatype", TYPED)
def test_typed_contents_come_back_exact_in_the_same_field(client, datatype):
    sent = values(datatype)
    response = client.infer(typed_request(datatype, FIELDS[datatype], sent.tolist()))
    assert not response.raw_output_contents
    (output,) = response.outputs
    assert output.datatype == datatype and list(output.shape) == [sent.size]
    assert [field.name for field, _ in output.contents.ListFields()] == [FIELDS[datatype]]
    got = list(getattr(output.contents, FIELDS[datatype]))
    assert_exact(np.array(got, dtype=object if datatype == "BYTES" else sent.dtype), sent)


@pytest.mark.parametrize("datatype", ONNX_TYPES)
def test_raw_contents_come_back_exact_and_raw(client, datatype):
    sent = values(datatype)
    response = client.infer(raw_request(datatype.lower(), {"x": (datatype, [sent.size], to_raw(sent, datatype))}))
    assert response.outputs[0].datatype == datatype and not response.outputs[0].contents.ListFields()
    raw = response.raw_output_contents[0]
    if datatype == "BYTES":
        assert unpack_bytes(raw, "y") == sent.tolist()
    else:
        assert_exact(np.frombuffer(raw, dtype=np.dtype(sent.dtype).newbyteorder("<")).astype(sent.dtype), sent)


@pytest.mark.parametrize("datatype", ONNX_TYPES)
def test_rest_json_comes_back_exact(server, datatype):
    sent = values(datatype)
    data = [item.decode() for item in sent] if datatype == "BYTES" else sent.tolist()
    status, body = post(
        f"{server.http_url}/v2/models/{datatype.lower()}/infer",
        {"inputs": [{"name": "x", "datatype": datatype, "shape": [sent.size], "data": data}]},
    )
    assert status == 200, body
    (output,) = body["outputs"]
    assert output["datatype"] == datatype and output["shape"] == [sent.size]
    if datatype == "BYTES":
        assert output["data"] == data
    else:
        assert_exact(np.array(output["data"], dtype=sent.dtype), sent)


@pytest.mark.parametrize("datatype", ONNX_TYPES)
def test_tritonclient_grpc_and_http_binary_and_json_come_back_exact(server, datatype):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    sent = values(datatype)
    triton = grpcclient.InferenceServerClient(server.grpc_target)
    tensor = grpcclient.InferInput("x", [sent.size], datatype)
    tensor.set_data_from_numpy(sent)
    assert_exact(triton.infer(datatype.lower(), [tensor]).as_numpy("y"), sent)
    triton.close()
    triton = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    for binary in (True, False):
        tensor = httpclient.InferInput("x", [sent.size], datatype)
        tensor.set_data_from_numpy(sent, binary_data=binary)
        wanted = [httpclient.InferRequestedOutput("y", binary_data=binary)]
        got = triton.infer(datatype.lower(), [tensor], outputs=wanted).as_numpy("y")
        if datatype == "BYTES" and not binary:  # JSON carries text, and tritonclient gives it as str
            got = np.array([item.encode() for item in got], dtype=object)
        assert_exact(got, sent)
    triton.close()


@pytest.mark.parametrize("datatype", ONNX_TYPES)
def test_typed_contents_in_another_field_are_invalid_argument_saying_where_they_go(client, datatype):
    expected = FIELDS[datatype]
    for field in sorted(set(SAMPLES) - {expected}):
        details = refused(client, typed_request(datatype, field, [SAMPLES[field]] * 2))
        if expected is None:
            assert details == (
                f"input 'x': FP16 has no typed contents in the V2 protocol, got {field}; send FP16 data "
                "in raw_input_contents (2 bytes per element, little-endian), as tritonclient does"
            )
        else:
            assert details == (
                f"input 'x': {datatype} data goes in contents.{expected}, got {field}; "
                f"send it in {expected} alone (or in raw_input_contents)"
            )
    if expected is not None:  # the right field beside a wrong one: MLServer read only the first
        request = typed_request(datatype, expected, [SAMPLES[expected]] * 2)
        other = "fp64_contents" if expected != "fp64_contents" else "int64_contents"
        getattr(request.inputs[0].contents, other).extend([SAMPLES[other]] * 2)
        assert f"got {' and '.join(sorted([expected, other], key=list(SAMPLES).index))};" in refused(client, request)


@pytest.mark.parametrize("datatype", ONNX_TYPES)
def test_an_input_without_contents_is_invalid_argument_saying_where_its_data_goes(client, datatype):
    request = service_pb2.ModelInferRequest(model_name=datatype.lower())
    request.inputs.add(name="x", datatype=datatype, shape=[3])
    where = (
        "raw_input_contents (FP16 has no typed contents)"
        if FIELDS[datatype] is None
        else (f"contents.{FIELDS[datatype]} or raw_input_contents")
    )
    assert refused(client, request) == f"input 'x' ({datatype}, shape [3]) carries no data; send it in {where}"


@pytest.mark.parametrize(
    "datatype, field, data, expected",
    [
        ("UINT8", "uint_contents", [1, 300], "values must fit UINT8 (0..255)"),
        ("UINT16", "uint_contents", [70000], "values must fit UINT16 (0..65535)"),
        ("INT8", "int_contents", [-129], "values must fit INT8 (-128..127)"),
        ("INT16", "int_contents", [40000], "values must fit INT16 (-32768..32767)"),
        ("UINT32", "int_contents", [-1], "UINT32 data goes in contents.uint_contents"),  # uint_contents cannot hold -1
        ("UINT64", "int64_contents", [-1], "UINT64 data goes in contents.uint64_contents"),
        ("INT64", "uint64_contents", [2**63], "INT64 data goes in contents.int64_contents"),
    ],
)
def test_typed_values_out_of_range_are_invalid_argument_not_wrapped(client, datatype, field, data, expected):
    assert f"input 'x': {expected}" in refused(client, typed_request(datatype, field, data))
    sent = values(datatype)  # and the server keeps serving
    response = client.infer(typed_request(datatype, FIELDS[datatype], sent.tolist()))
    assert list(getattr(response.outputs[0].contents, FIELDS[datatype])) == sent.tolist()


@pytest.mark.parametrize(
    "datatype, data, expected",
    [
        ("UINT8", [300], "values must fit UINT8 (0..255)"),
        ("UINT32", [-1], "values must fit UINT32 (0..4294967295)"),
        ("UINT64", [-1], "values must fit UINT64 (0..18446744073709551615)"),
        ("UINT64", [2**64], "values must fit UINT64 (0..18446744073709551615)"),
        ("INT64", [2**63], "values must fit INT64 (-9223372036854775808..9223372036854775807)"),
        ("INT8", [1.5], "INT8 data must be integers, got float"),
        ("FP16", [70000.0], "values must fit FP16 (magnitudes up to 6.55e+04)"),
        ("FP32", [1e39], "values must fit FP32 (magnitudes up to 3.403e+38)"),
        ("FP64", ["1"], "FP64 data must be numbers, got str"),
        ("BOOL", [1], "BOOL data must be true/false values"),
        ("BYTES", [1], "BYTES data must be strings"),
    ],
)
def test_rest_json_out_of_range_or_of_another_type_is_400(server, datatype, data, expected):
    url = f"{server.http_url}/v2/models/{datatype.lower()}/infer"
    status, body = post(url, {"inputs": [{"name": "x", "datatype": datatype, "shape": [1], "data": data}]})
    assert status == 400 and f"input 'x': {expected}" in error_text(body), body
    sent = values(datatype)[:1]
    good = [item.decode() for item in sent] if datatype == "BYTES" else sent.tolist()
    status, body = post(url, {"inputs": [{"name": "x", "datatype": datatype, "shape": [1], "data": good}]})
    assert status == 200 and body["outputs"][0]["data"] == good, body


@pytest.mark.parametrize(
    "datatype, wrong, expected",
    [
        ("INT8", 128, "values must fit INT8 (-128..127)"),
        ("INT64", 1.0, "INT64 data must be integers, got float"),
        ("UINT64", -1, "values must fit UINT64 (0..18446744073709551615)"),
    ],
)
def test_a_large_rest_json_integer_tensor_comes_back_exact_and_a_wrong_value_in_it_is_400(server, datatype, wrong, expected):
    """Past INLINE_BODY_BYTES a list of integers is parsed a piece at a time into an array; what the runtime refuses in
    a short list it refuses in a long one, with the same message."""
    info = np.iinfo(V2_TO_NUMPY[datatype])
    sent = np.resize(np.array([info.min, info.max, 0, 1, info.max // 3], dtype=info.dtype), 80_000)
    url = f"{server.http_url}/v2/models/{datatype.lower()}/infer"
    body = {"inputs": [{"name": "x", "datatype": datatype, "shape": [sent.size], "data": sent.tolist()}]}
    assert len(json.dumps(body)) > INLINE_BODY_BYTES
    status, answer = post(url, body)
    assert status == 200, answer
    assert_exact(np.array(answer["outputs"][0]["data"], dtype=sent.dtype), sent)
    body["inputs"][0]["data"][-2] = wrong
    status, answer = post(url, body)
    assert status == 400 and f"input 'x': {expected}" in error_text(answer), answer


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(datatype=st.sampled_from(list(ONNX_TYPES)), data=st.data())
def test_generated_typed_requests_are_served_exactly_or_invalid_argument(client, datatype, data):
    """Any datatype, shape and typed fields filled with whatever the protobuf takes (half the time the datatype's
    own field and a shape that fits, so that both outcomes are drawn): served with the data back as sent, and only
    from the datatype's own field; anything else INVALID_ARGUMENT, never INTERNAL."""
    own = [FIELDS[datatype]] if FIELDS[datatype] else []
    fields = data.draw(st.just(own) | st.lists(st.sampled_from(list(FIELD_VALUES)), min_size=1, max_size=2, unique=True))
    sent = {field: data.draw(st.lists(FIELD_VALUES[field], min_size=1, max_size=4)) for field in fields}
    shape = data.draw(st.just([sum(map(len, sent.values()))]) | st.lists(st.integers(-1, 4), max_size=2))
    request = service_pb2.ModelInferRequest(model_name=datatype.lower())
    tensor = request.inputs.add(name="x", datatype=datatype)
    tensor.shape.extend(shape)
    for field, values_sent in sent.items():
        getattr(tensor.contents, field).extend(values_sent)
    try:
        response = client.infer(request)
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
        event("refused")
        return
    event("served")
    assert fields == own and shape == [len(sent[own[0]])], (sent, shape)
    got = list(getattr(response.outputs[0].contents, own[0]))
    assert np.array_equal(np.array(got, dtype=object), np.array(sent[own[0]], dtype=object)), (got, sent)
