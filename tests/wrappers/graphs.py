"""Small real ONNX graphs for tests: built with onnx.helper, run by ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

IR_VERSION = 8  # onnx 1.23 writes IR 14 by default; ONNX Runtime 1.31 reads at most 13
WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3)


def matmul_graph(path: Path, batch: int | str = "batch") -> Path:
    """y = x @ W with x [batch, 4], y [batch, 3]; `batch` fixed (an int) or dynamic (a name)."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [4, 3], WEIGHT.ravel().tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)
    onnx.save(model, path)
    return path


def scalar_graph(path: Path) -> Path:
    """y = x for a scalar x: a graph with no batch dimension to merge requests on."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "scalar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION), path)
    return path
