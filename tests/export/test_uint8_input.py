"""uint8 NHWC image inputs with the normalisation in the graph: parity, refusals, the command, a served request."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.cli import main as export_main
from export.package import write_artifact
from export.uint8_input import Normalisation, Uint8InputError, with_uint8_input
from slipway.artifact import load_input_example, verify_artifact
from slipway.cli import UserError
from slipway.local_server import LocalServer
from tests.graphs import onnx_model
from tests.wrappers.v2 import GrpcClient, post, raw_output, raw_request

IMAGENET = Normalisation(1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def image_graph(shape: list, elem_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """scores = Flatten(x) @ W over a small image input: every pixel moves the answer, so a wrong step shows."""
    features = int(np.prod(shape[1:]))
    weight = np.random.default_rng(0).normal(size=(features, 5)).astype(np.float32)
    nodes = [helper.make_node("Flatten", ["x"], ["flat"])]
    if elem_type != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", ["flat"], ["flat32"], to=TensorProto.FLOAT))
    nodes.append(helper.make_node("MatMul", [nodes[-1].output[0], "W"], ["scores"]))
    graph = helper.make_graph(
        nodes,
        "image",
        [helper.make_tensor_value_info("x", elem_type, shape)],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [shape[0], 5])],
        [numpy_helper.from_array(weight, "W")],
    )
    return onnx_model(graph)


def run(model: onnx.ModelProto, array: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": array})[0]


PIXELS = np.random.default_rng(1).integers(0, 256, size=(4, 6, 5, 3), dtype=np.uint8)


@pytest.mark.parametrize(("shape", "channels_last"), [(["N", 6, 5, 3], True), (["N", 3, 6, 5], False)])
def test_uint8_graph_equals_float_graph_on_normalised_pixels(shape, channels_last):
    model = image_graph(shape)
    converted = with_uint8_input(model, IMAGENET)
    (graph_input,) = converted.graph.input
    assert graph_input.name == "x" and graph_input.type.tensor_type.elem_type == TensorProto.UINT8
    np.testing.assert_allclose(run(converted, PIXELS), run(model, IMAGENET.apply(PIXELS, channels_last)), rtol=1e-5, atol=1e-4)


def test_fp16_graph_gets_its_input_type_after_the_normalisation():
    model = image_graph(["N", 6, 5, 3], TensorProto.FLOAT16)
    expected = run(model, IMAGENET.apply(PIXELS, True).astype(np.float16))
    np.testing.assert_allclose(run(with_uint8_input(model, IMAGENET), PIXELS), expected, rtol=1e-3, atol=1e-2)


def test_pixels_survive_the_round_trip_through_the_float_input():
    assert np.array_equal(IMAGENET.invert(IMAGENET.apply(PIXELS, False), False), PIXELS)


@pytest.mark.parametrize(
    ("model", "normalisation", "message"),
    [
        (image_graph(["N", 6, 5, 3]), Normalisation(1 / 255, (0.1, 0.2), (1.0,)), "--mean has 2 values; input 'x' has 3"),
        (image_graph(["N", 6, 5, 3]), Normalisation(1 / 255, (0.0,), (1.0, 0.0, 1.0)), "--std must not contain 0"),
        (image_graph(["N", 4, 5, 6]), Normalisation(1 / 255, (0.0,), (1.0,)), "need an image input"),
        (image_graph(["N", 30], TensorProto.INT64), Normalisation(1 / 255, (0.0,), (1.0,)), "is INT64, not a float image"),
    ],
)
def test_what_cannot_take_uint8_pixels_is_refused_by_name(model, normalisation, message):
    with pytest.raises(Uint8InputError, match=message):
        with_uint8_input(model, normalisation)


def write_float_artifact(folder, extra=None):
    """A float NCHW artifact folder as `export` writes it, with ImageNet-normalised example rows."""
    model = image_graph(["N", 3, 6, 5])
    inputs = {"x": IMAGENET.apply(PIXELS, False)}
    write_artifact(
        folder,
        onnx_bytes=model.SerializeToString(),
        name="pixels",
        example_inputs=inputs,
        example_outputs={"scores": run(model, inputs["x"])},
        extra_settings=extra,
    )
    return folder


@pytest.fixture(scope="module")
def float_artifact(tmp_path_factory):
    return write_float_artifact(tmp_path_factory.mktemp("float") / "fp32")


@pytest.fixture(scope="module")
def uint8_artifact(float_artifact):
    out = float_artifact.parent / "fp32-uint8"
    assert export_main(["uint8-input", str(float_artifact), "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225"]) == 0
    return out


def test_command_writes_a_verified_uint8_artifact_that_records_its_input(float_artifact, uint8_artifact):
    verify_artifact(uint8_artifact)
    settings = json.loads((uint8_artifact / "model-settings.json").read_text())
    assert settings["inputs"] == [{"name": "x", "datatype": "UINT8", "shape": [-1, 6, 5, 3]}]
    lineage = json.loads((uint8_artifact / "variant.json").read_text())["input"]
    assert lineage["std"] == list(IMAGENET.std) and lineage["graph_layout"] == "NCHW"
    inputs, outputs, _ = load_input_example(uint8_artifact)
    assert inputs["x"].dtype == np.uint8 and np.array_equal(inputs["x"], PIXELS)
    _, float_outputs, _ = load_input_example(float_artifact)
    np.testing.assert_allclose(outputs["scores"], float_outputs["scores"], rtol=1e-5, atol=1e-4)


def test_command_takes_the_numbers_of_the_artifacts_preprocess_settings(tmp_path):
    preprocess = {"mean": list(IMAGENET.mean), "std": list(IMAGENET.std)}
    write_float_artifact(tmp_path / "fp32", {"preprocess": preprocess})
    assert export_main(["uint8-input", str(tmp_path / "fp32"), "--out", str(tmp_path / "u8")]) == 0
    settings = json.loads((tmp_path / "u8" / "model-settings.json").read_text())
    assert settings["parameters"]["extra"]["preprocess"] == preprocess  # decoded images now reach the graph as uint8
    inputs, outputs, _ = load_input_example(tmp_path / "u8")
    assert np.array_equal(inputs["x"], PIXELS)


def test_command_refuses_bad_numbers_in_one_line_and_writes_nothing(float_artifact, tmp_path):
    out = tmp_path / "never"
    with pytest.raises(UserError, match=r"--mean has 2 values; input 'x' has 3 channel\(s\): pass 1 value or 3"):
        export_main(["uint8-input", str(float_artifact), "--out", str(out), "--mean", "0.5,0.5"])
    with pytest.raises(UserError, match="--std 'a,b' is not a list of numbers"):
        export_main(["uint8-input", str(float_artifact), "--out", str(out), "--std", "a,b"])
    assert not out.exists()


@pytest.mark.slow
def test_uint8_artifact_serves_uint8_over_grpc_raw_and_rest(uint8_artifact):
    inputs, outputs, _ = load_input_example(uint8_artifact)
    pixels, expected = inputs["x"], outputs["scores"]
    with LocalServer(uint8_artifact) as server:
        client = GrpcClient(server.grpc_target)
        try:
            response = client.infer(raw_request("pixels", {"x": ("UINT8", list(pixels.shape), pixels.tobytes())}))
        finally:
            client.close()
        np.testing.assert_allclose(raw_output(response), expected, rtol=1e-5, atol=1e-4)
        url = f"{server.http_url}/v2/models/pixels/infer"
        status, body = post(
            url, {"inputs": [{"name": "x", "datatype": "UINT8", "shape": list(pixels.shape), "data": pixels.ravel().tolist()}]}
        )
        assert status == 200
        np.testing.assert_allclose(np.asarray(body["outputs"][0]["data"]).reshape(expected.shape), expected, rtol=1e-5, atol=1e-4)
        status, body = post(
            url,
            {
                "inputs": [
                    {
                        "name": "x",
                        "datatype": "FP32",
                        "shape": list(pixels.shape),
                        "data": pixels.astype(np.float32).ravel().tolist(),
                    }
                ]
            },
        )
        assert status == 400 and "UINT8" in json.dumps(body), body
