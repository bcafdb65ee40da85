"""The graph's inputs and outputs as the V2 protocol describes them: names, datatypes, shapes with dynamic axes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import onnxruntime as ort

# ONNX element types as ONNX Runtime names them, and the V2 protocol datatype of each.
ONNX_TO_V2 = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(bool)": "BOOL",
    "tensor(string)": "BYTES",
}
DYNAMIC = -1


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output as the V2 protocol describes it; -1 marks a dynamic dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def accepts_shape(self, shape: tuple[int, ...]) -> bool:
        if len(shape) != len(self.shape):
            return False
        for axis, size in self._fixed_axes:  # called per request: no generator, only the fixed axes
            if shape[axis] != size:
                return False
        return True

    @cached_property
    def _fixed_axes(self) -> tuple[tuple[int, int], ...]:
        return tuple((axis, size) for axis, size in enumerate(self.shape) if size != DYNAMIC)


def _spec(node: ort.NodeArg) -> TensorSpec:
    datatype = ONNX_TO_V2.get(node.type)
    if datatype is None:
        raise ValueError(f"graph tensor {node.name!r} has type {node.type}, which the V2 protocol cannot carry")
    shape = tuple(dim if isinstance(dim, int) and dim > 0 else DYNAMIC for dim in node.shape)
    return TensorSpec(node.name, datatype, shape)


def describe(session: ort.InferenceSession) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The graph's inputs and outputs, in graph order."""
    return [_spec(node) for node in session.get_inputs()], [_spec(node) for node in session.get_outputs()]
