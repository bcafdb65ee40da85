import logging
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from wrappers.session import DYNAMIC, choose_providers, cpu_limit, create_session, describe
from wrappers.settings import RuntimeSettings, SettingsError, parse_runtime_settings


@pytest.fixture
def matmul_model(tmp_path):
    """y = x @ W with a dynamic batch dimension: enough graph to read metadata from."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], np.arange(12, dtype=np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # ORT 1.31 reads IR <= 13
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return path


def test_describe_reads_names_types_and_dynamic_dims(matmul_model):
    session = create_session(matmul_model, RuntimeSettings())
    inputs, outputs = describe(session)
    assert [(s.name, s.datatype, s.shape) for s in inputs] == [("x", "FP32", (DYNAMIC, 4))]
    assert [(s.name, s.datatype, s.shape) for s in outputs] == [("y", "FP32", (DYNAMIC, 3))]
    assert inputs[0].accepts_shape((7, 4)) and not inputs[0].accepts_shape((7, 5)) and not inputs[0].accepts_shape((4,))


def test_unavailable_providers_fall_back_to_cpu_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        chosen = choose_providers(["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert chosen[-1] == "CPUExecutionProvider"
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert chosen == ["CPUExecutionProvider"]
        assert "CUDAExecutionProvider is not available" in caplog.text


def test_threads_follow_the_cpu_limit_not_the_host(matmul_model):
    limit = cpu_limit()
    assert 0 < limit <= len(os.sched_getaffinity(0))
    session = create_session(matmul_model, RuntimeSettings(intra_op_threads=None))
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ np.arange(12, dtype=np.float32).reshape(4, 3))


def test_unknown_or_invalid_settings_are_refused_with_the_key():
    with pytest.raises(SettingsError, match="intra_op_thread"):
        parse_runtime_settings({"intra_op_thread": 2})
    with pytest.raises(SettingsError, match="inter_op_threads"):
        parse_runtime_settings({"inter_op_threads": -1})
    assert parse_runtime_settings(None) == RuntimeSettings()
