"""Request bodies as clients send them (`slipway.v2_requests`): what the server decodes is what was meant."""

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from slipway.v2_requests import grpc_request, rest_body
from slipway.v2_wire import Location, TensorError, unpack_bytes


def test_grpc_request_carries_raw_contents_and_the_version():
    image = np.arange(64, dtype=np.float32).reshape(1, 8, 8, 1)
    request = service_pb2.ModelInferRequest.FromString(grpc_request("digits", {"image": image}, version="2"))
    assert (request.model_name, request.model_version) == ("digits", "2")
    assert list(request.inputs[0].shape) == [1, 8, 8, 1] and request.inputs[0].datatype == "FP32"
    assert np.array_equal(np.frombuffer(request.raw_input_contents[0], np.float32).reshape(1, 8, 8, 1), image)


def test_inputs_in_shared_memory_go_as_their_location_and_the_others_as_raw_contents():
    image, mask = np.ones((1, 4), np.float32), np.zeros((1, 4), np.uint8)
    request = service_pb2.ModelInferRequest.FromString(
        grpc_request("m", {"image": image, "mask": mask}, shared={"image": Location("slot0", 64, 16)})
    )
    where = request.inputs[0].parameters
    assert (
        where["shared_memory_region"].string_param,
        where["shared_memory_offset"].int64_param,
        where["shared_memory_byte_size"].int64_param,
    ) == ("slot0", 64, 16)
    assert not request.inputs[1].parameters and list(request.raw_input_contents) == [mask.tobytes()]


def test_bytes_inputs_go_as_length_prefixed_text_over_grpc_and_as_strings_over_rest():
    texts = np.array(["héllo", b"raw", 7], dtype=object)
    request = service_pb2.ModelInferRequest.FromString(grpc_request("m", {"text": texts}))
    assert request.inputs[0].datatype == "BYTES"
    assert unpack_bytes(request.raw_input_contents[0], "text") == ["héllo".encode(), b"raw", b"7"]
    body = json.loads(rest_body({"text": texts}))
    assert body["inputs"][0] == {"name": "text", "datatype": "BYTES", "shape": [3], "data": ["héllo", "raw", "7"]}


def test_an_array_no_v2_datatype_carries_is_refused_naming_what_to_send():
    with pytest.raises(TensorError, match=r"dtype complex64 have no V2 datatype; send one of \[.*'FP32'.*\] or BYTES"):
        grpc_request("m", {"x": np.zeros(2, np.complex64)})
