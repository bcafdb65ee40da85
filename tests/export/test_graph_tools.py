"""Graph surgery and bookkeeping on small hand-built ONNX graphs: slimming, QDQ outputs, sizes, profiles."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from export.measure import onnx_size
from export.optimize import optimize_graph, strip
from export.profile import operator_times
from export.quantize import float_outputs, quantizable_operators, quantize_int8
from tests.graphs import IR_VERSION, exp_model, onnx_model


def dense_model(with_junk: bool = False) -> onnx.ModelProto:
    """y = softmax(x @ W + b) with a dynamic batch; optionally an unused initializer and doc strings."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(size=(4, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(3, np.float32), "b"),
    ]
    if with_junk:
        inits.append(numpy_helper.from_array(np.ones((100, 100), np.float32), "unused"))
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], doc_string="matmul here"),
        helper.make_node("Add", ["xw", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        inits,
        doc_string="a graph",
    )
    return onnx_model(graph)


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_optimize_keeps_answers_and_drops_what_only_costs_bytes():
    model = dense_model(with_junk=True)
    optimized = optimize_graph(model)
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(run(optimized, x), run(model, x), atol=1e-6)
    assert "unused" not in {init.name for init in optimized.graph.initializer}
    assert not optimized.graph.doc_string and not any(node.doc_string for node in optimized.graph.node)
    assert {op.domain for op in optimized.opset_import} <= {"", "ai.onnx"}  # ORT's own domains are not left declared
    assert optimized.ir_version == IR_VERSION
    assert len(optimized.SerializeToString()) < len(model.SerializeToString())


def test_strip_removes_declared_but_unused_opsets():
    model = dense_model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    strip(model)
    assert [op.domain for op in model.opset_import] == [""]


def test_strip_keeps_the_initializers_a_loop_body_reads():
    """A recurrent layer converts to a Loop whose body reads main-graph constants by name: they are in use."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "step"], ["v_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [3]),
        ],
    )
    inits = [
        numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32), "step"),
        numpy_helper.from_array(np.array(3, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "go"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go", "x"], ["y"], body=body)],
        "loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        inits,
    )
    model = onnx_model(graph)
    strip(model)
    assert {init.name for init in model.graph.initializer} == {"step", "trips", "go"}
    onnx.checker.check_model(model)
    x = np.zeros(3, np.float32)
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, [3.0, 6.0, 9.0])


def test_fp16_keeps_float32_outputs_that_other_nodes_also_read():
    """`probabilities` is an output and is read again (here by a Reciprocal): the float16 copy must still load."""
    from export.float16 import to_float16

    nodes = [
        helper.make_node("Softmax", ["x"], ["probabilities"], axis=-1),
        helper.make_node("Reciprocal", ["probabilities"], ["inverse"]),
    ]
    graph = helper.make_graph(
        nodes,
        "read_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("inverse", TensorProto.FLOAT, ["N", 3]),
        ],
    )
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    half = to_float16(onnx_model(graph))
    probabilities, inverse = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    assert [o.name for o in half.graph.output] == ["probabilities", "inverse"]
    assert probabilities.dtype == inverse.dtype == np.float32
    expected = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=1e-3)
    np.testing.assert_allclose(inverse, 1 / expected, rtol=1e-2)


def test_fp16_casts_a_mask_to_float16_where_it_meets_float16_values():
    """A bool mask cast to float32 (an attention mask, a token count) must become float16 with the values it multiplies."""
    from export.float16 import to_float16

    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("Cast", ["keep"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["h", "mask"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mask",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("keep", TensorProto.BOOL, ["N", 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        value_info=[helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", 3])],
    )
    x = np.array([[-1.0, 0.5, 2.0], [3.0, -0.25, 1.0]], np.float32)
    keep = np.array([[True, True, False], [True, True, True]])
    half = to_float16(onnx_model(graph))
    y = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "keep": keep})[0]
    np.testing.assert_allclose(y, np.maximum(x, 0) * keep, atol=1e-3)


def test_int8_keeps_float_outputs_and_counts_only_real_parameters():
    model = dense_model()
    calibration = {"x": np.random.default_rng(2).normal(size=(64, 4)).astype(np.float32)}
    quantized = quantize_int8(model, calibration)
    ops = [node.op_type for node in quantized.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    producer = {out: node.op_type for node in quantized.graph.node for out in node.output}
    assert producer["y"] == "Softmax"  # the output is not rounded to 8 bits
    x = calibration["x"][:8]
    assert (run(quantized, x).argmax(1) == run(model, x).argmax(1)).mean() >= 0.75
    # 12 weights + 3 biases: scales and zero points of the Q/DQ pairs are bookkeeping
    assert onnx_size(quantized.SerializeToString()).parameters == onnx_size(model.SerializeToString()).parameters == 15


def test_float_outputs_leaves_graphs_without_an_output_pair_alone():
    model = dense_model()
    before = model.SerializeToString()
    float_outputs(model)
    assert model.SerializeToString() == before


def test_quantizable_operators_names_what_int8_can_reach():
    assert quantizable_operators(dense_model()) == ["MatMul"]
    assert quantizable_operators(exp_model()) == []


def test_operator_times_sum_kernel_time_per_type_after_warm_up():
    def node(op, ts, dur):
        return {"cat": "Node", "name": f"{op}_node_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    trace = [
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
        node("Conv", 1, 500),  # warm-up run: left out
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 100},
        node("Conv", 101, 30),
        node("Gemm", 120, 10),
        node("Conv", 130, 20),
        {"cat": "Node", "name": "Conv_fence_before", "ts": 140, "dur": 999, "args": {"op_name": "Conv"}},
    ]
    times = operator_times(trace, skip_runs=1)
    assert [(t.op_type, t.calls, t.total_us) for t in times] == [("Conv", 2, 50.0), ("Gemm", 1, 10.0)]
    assert times[0].share == 50 / 60 and times[0].mean_us == 25


def _zero_points(model: onnx.ModelProto) -> list[np.ndarray]:
    inits = {init.name: init for init in model.graph.initializer}
    return [
        numpy_helper.to_array(inits[node.input[2]])
        for node in model.graph.node
        if node.op_type == "QuantizeLinear" and len(node.input) > 2 and node.input[2] in inits
    ]


def test_tensorrt_target_makes_symmetric_int8_activations():
    from export.quantize import Target

    calibration = {"x": np.random.default_rng(3).normal(size=(32, 4)).astype(np.float32)}
    cpu = _zero_points(quantize_int8(dense_model(), calibration))
    trt = _zero_points(quantize_int8(dense_model(), calibration, target=Target.tensorrt))
    assert cpu and all(zp.dtype == np.uint8 for zp in cpu)
    assert trt and all(zp.dtype == np.int8 and not zp.any() for zp in trt)  # S8S8: symmetric, zero point 0


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_other_calibration_methods_quantize_too(method):
    from export.quantize import CalibrationMethod

    calibration = {"x": np.random.default_rng(4).normal(size=(64, 4)).astype(np.float32)}
    quantized = quantize_int8(dense_model(), calibration, method=CalibrationMethod(method))
    x = calibration["x"][:16]
    assert (run(quantized, x).argmax(1) == run(dense_model(), x).argmax(1)).mean() >= 0.75
