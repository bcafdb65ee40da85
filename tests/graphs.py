"""Small real ONNX graphs for tests: built with onnx.helper, run by ONNX Runtime.

Every test graph goes through `onnx_model`, which pins the IR version: onnx 1.23's
`make_model` writes IR 14 by default, and ONNX Runtime 1.31 reads at most 13.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

IR_VERSION = 8
OPSET = 17
WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3)


def onnx_model(graph: onnx.GraphProto, opset_imports: list | None = None) -> onnx.ModelProto:
    """`graph` as a model ONNX Runtime loads: default opset 17, IR version pinned."""
    return helper.make_model(graph, opset_imports=opset_imports or [helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def exp_model() -> onnx.ModelProto:
    """y = exp(x) over [N, 4]: no operator ONNX Runtime can quantize."""
    return onnx_model(
        helper.make_graph(
            [helper.make_node("Exp", ["x"], ["y"])],
            "exp",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        )
    )


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
    onnx.save(onnx_model(graph), path)
    return path


def scalar_graph(path: Path) -> Path:
    """y = x for a scalar x: a graph with no batch dimension to merge requests on."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "scalar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    onnx.save(onnx_model(graph), path)
    return path


def identity_graph(path: Path, elem_type: int) -> Path:
    """y = x over [N] of one ONNX element type (a `TensorProto` constant): what was sent comes back unchanged."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", elem_type, ["N"])],
        [helper.make_tensor_value_info("y", elem_type, ["N"])],
    )
    onnx.save(onnx_model(graph), path)
    return path
