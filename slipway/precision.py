"""What numbers an artifact's graph computes in: fp32, fp16, or int8 as U8S8 or S8S8.

int8 comes in two flavours that serve different hardware: uint8 activations with int8 weights
(U8S8) for x86 CPUs' VNNI kernels, symmetric int8 for both (S8S8), the only int8 TensorRT reads.
A GPU deployment must never get the CPU's U8S8: CUDA has no kernels for it and TensorRT refuses it.

Read from the artifact itself: its `variant.json` (what `python -m export variants` made it as)
where it says, else the graph (the type QuantizeLinear quantizes to, float16 weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from slipway.artifact import MODEL_FILE, VARIANT_FILE

U8S8 = "U8S8"
S8S8 = "S8S8"
_QUANTIZED = {
    "QuantizeLinear",
    "DequantizeLinear",
    "DynamicQuantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "ConvInteger",
    "MatMulInteger",
}


@dataclass(frozen=True)
class Numerics:
    precision: str  # fp32, fp16 or int8
    int8_format: str | None = None  # U8S8 or S8S8 for int8; None where int8's flavour is unknown
    variant: str | None = None  # the export variant's name (fp32, slim-int8, ...) where recorded
    source: str = "model.onnx"  # what it was read from

    @property
    def describe(self) -> str:
        kind = f"int8 ({self.int8_format})" if self.precision == "int8" and self.int8_format else self.precision
        return f"{self.variant} variant, {kind}" if self.variant and self.variant != self.precision else kind

    @property
    def for_gpu(self) -> bool | None:
        """True for what GPUs serve (fp32, fp16, S8S8), False for the CPU's U8S8, None for int8 of unknown flavour."""
        if self.precision != "int8":
            return True
        return None if self.int8_format is None else self.int8_format == S8S8

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NumericsError(ValueError):
    """An artifact's model.onnx cannot be read as ONNX; the message names the file and what to do."""


def read_numerics(folder: Path) -> Numerics | None:
    """The numerics of an artifact folder: from its variant.json where it says, else from model.onnx; None without either.

    A model.onnx that is not ONNX (truncated, another format) is a `NumericsError`, not a parser's traceback."""
    folder = Path(folder)
    recorded = _from_variant_file(folder / VARIANT_FILE)
    if recorded is not None and (recorded.precision != "int8" or recorded.int8_format):
        return recorded
    model = folder / MODEL_FILE
    if not model.is_file():
        return recorded
    import onnx
    from google.protobuf.message import DecodeError

    try:
        graph = onnx.load(str(model), load_external_data=False)
    except (DecodeError, ValueError) as err:
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise NumericsError(
            f"{model} is not an ONNX model ({why}): export the artifact again "
            "(python -m export convert, or python -m export import MODEL.onnx) or give the folder that holds it"
        ) from err
    precision, int8_format = graph_numerics(graph)
    return Numerics(precision, int8_format, recorded.variant if recorded else None, "model.onnx")


def _from_variant_file(path: Path) -> Numerics | None:
    try:
        lineage = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(lineage, dict) or lineage.get("precision") not in ("fp32", "fp16", "int8"):
        return None
    details = lineage.get("details")
    if not isinstance(details, dict):
        details = {}
    activations = str(details.get("activations", ""))
    int8_format = None
    if lineage["precision"] == "int8":
        int8_format = U8S8 if activations.startswith("uint8") else S8S8 if activations.startswith("int8") else None
    variant = lineage.get("variant") if isinstance(lineage.get("variant"), str) else None
    return Numerics(lineage["precision"], int8_format, variant, VARIANT_FILE)


def graph_numerics(model: onnx.ModelProto) -> tuple[str, str | None]:
    """(precision, int8 format) of an ONNX graph: int8 where it quantizes, U8S8 where anything is quantized to
    uint8 (the activations of ONNX Runtime's CPU flavour), fp16 where weights are float16, else fp32."""
    from onnx import TensorProto

    graph = model.graph
    ops = {node.op_type for node in graph.node}
    if ops & _QUANTIZED:
        types = {init.name: init.data_type for init in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        types[node.output[0]] = attribute.t.data_type
        kinds: set[int | None] = set()  # None: a zero point whose type was not read
        for node in graph.node:
            if node.op_type == "DynamicQuantizeLinear":
                kinds.add(TensorProto.UINT8)  # always uint8
            elif node.op_type == "QuantizeLinear":
                declared = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), None)
                zero_point = node.input[2] if len(node.input) > 2 and node.input[2] else None
                # Without a zero point (or output_dtype), QuantizeLinear quantizes to uint8.
                kinds.add(declared or (types.get(zero_point) if zero_point else TensorProto.UINT8))
        if TensorProto.UINT8 in kinds:
            return "int8", U8S8
        return "int8", S8S8 if kinds == {TensorProto.INT8} else None  # no QuantizeLinear, or a type not read: unknown
    if any(init.data_type == TensorProto.FLOAT16 for init in graph.initializer):
        return "fp16", None
    return "fp32", None
