"""Static int8 QDQ quantization with ONNX Runtime, calibrated on real (or synthetic) rows.

Static, not dynamic: dynamic quantization turns Conv into ConvInteger and runs slower
than fp32 on CNNs. QDQ, not QOperator: the graph stays standard ONNX and TensorRT 10+
reads precisions from it. The activation type follows the target: uint8 activations
with int8 per-channel weights (U8S8) for x86 CPUs, symmetric int8 for both (S8S8) for
TensorRT and every GPU target (`slipway.precision` reads the flavour back from a graph).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

import numpy as np
import onnx

from export.optimize import strip

CALIBRATION_BATCH = 16


class Target(str, Enum):
    cpu = "cpu"  # U8S8 int8, variants timed on the CPU
    tensorrt = "tensorrt"  # S8S8 int8, variants timed on the CPU
    gpu = "gpu"  # S8S8 int8, the variant chosen by a GPU's timing (export.pipeline.choose_variant)

    @property
    def symmetric_int8(self) -> bool:
        return self is not Target.cpu


class CalibrationMethod(str, Enum):
    minmax = "minmax"
    entropy = "entropy"
    percentile = "percentile"


class QuantizeError(Exception):
    """The model cannot be quantized as asked; the message says why."""


def quantizable_operators(model: onnx.ModelProto) -> list[str]:
    """The graph's operator types that ONNX Runtime's QDQ quantizer knows how to quantize."""
    from onnxruntime.quantization.registry import QDQRegistry

    return sorted({node.op_type for node in model.graph.node if node.op_type in QDQRegistry and not node.domain})


def _batches(calibration: dict[str, np.ndarray], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    rows = len(next(iter(calibration.values())))
    for start in range(0, rows, batch_size):
        batch = {name: array[start : start + batch_size] for name, array in calibration.items()}
        short = batch_size - len(next(iter(batch.values())))
        if short and batch_size > 1:  # a fixed batch dimension: pad the last batch by repeating rows
            batch = {name: np.concatenate([array, array[:1].repeat(short, axis=0)]) for name, array in batch.items()}
        yield batch


def quantize_int8(
    model: onnx.ModelProto,
    calibration: dict[str, np.ndarray],
    *,
    target: Target = Target.cpu,
    method: CalibrationMethod = CalibrationMethod.minmax,
    fixed_batch: int | None = None,
) -> onnx.ModelProto:
    """`quant_pre_process` (shape inference + cleanup), then static QDQ with per-channel weights."""
    from onnxruntime import quantization as q

    if not quantizable_operators(model):
        from onnxruntime.quantization.registry import QDQRegistry

        raise QuantizeError(
            "none of the model's operators can be quantized by ONNX Runtime "
            f"(it quantizes {', '.join(sorted(QDQRegistry)[:8])}, ...): leave int8 out of --variants"
        )

    class Reader(q.CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = _batches(calibration, fixed_batch or CALIBRATION_BATCH)

        def get_next(self):
            return next(self._batches, None)

    symmetric = target.symmetric_int8
    methods = {
        CalibrationMethod.minmax: q.CalibrationMethod.MinMax,
        CalibrationMethod.entropy: q.CalibrationMethod.Entropy,
        CalibrationMethod.percentile: q.CalibrationMethod.Percentile,
    }
    with tempfile.TemporaryDirectory(prefix="slipway-quant-") as tmp:
        source, prepared, output = Path(tmp) / "fp32.onnx", Path(tmp) / "prepared.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, source)
        prepare(source, prepared)
        q.quantize_static(
            str(prepared),
            str(output),
            Reader(),
            quant_format=q.QuantFormat.QDQ,
            per_channel=True,
            # U8S8 on an x86 CPU without VNNI (AVX2, or AVX-512 without it: the AMD EPYC hosts here) adds pairs of
            # u8 x s8 products in 16 bits, which saturate with full 8-bit weights: 7-bit weights fit, on every CPU
            reduce_range=not symmetric,
            activation_type=q.QuantType.QInt8 if symmetric else q.QuantType.QUInt8,
            weight_type=q.QuantType.QInt8,
            calibrate_method=methods[method],
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
        quantized = onnx.load(output)
    quantized.ir_version = model.ir_version
    float_outputs(quantized)
    strip(quantized)
    onnx.checker.check_model(quantized)
    return quantized


SYMBOLIC_LEFTOVER = "sym_shape_infer_temp.onnx"  # ONNX Runtime writes it to the working folder when symbolic inference fails


def prepare(source: Path, prepared: Path) -> None:
    """`quant_pre_process` with symbolic shape inference, merging symbolic dims if it is incomplete, and with
    ONNX's own shape inference as a last resort.

    Symbolic inference stops short on some graphs (a MultiHeadAttention block's reshapes) with
    "Incomplete symbolic shape inference", which ended the whole `variants` run; the quantizer
    needs shapes, not necessarily symbolic ones. The file ONNX Runtime leaves behind in the
    working folder when it gives up is removed.
    """
    from onnxruntime.quantization.shape_inference import quant_pre_process

    leftovers_before = set(Path.cwd().glob(f"{SYMBOLIC_LEFTOVER}*"))
    try:
        for options in ({}, {"auto_merge": True}, {"skip_symbolic_shape": True}):
            try:
                quant_pre_process(str(source), str(prepared), **options)
                return
            except Exception as err:  # ONNX Runtime raises a bare Exception for an incomplete inference
                if "skip_symbolic_shape" in options or "symbolic shape inference" not in str(err):
                    raise
    finally:
        for leftover in set(Path.cwd().glob(f"{SYMBOLIC_LEFTOVER}*")) - leftovers_before:
            leftover.unlink(missing_ok=True)


def float_outputs(model: onnx.ModelProto) -> None:
    """Drop the Quantize/Dequantize pair in front of each graph output, in place.

    The quantizer rounds even the final outputs to 8 bits (probabilities in steps of
    1/255); clients read those numbers, and the pair buys no speed at the very end.
    """
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    graph_outputs = {output.name for output in graph.output}
    for output in graph.output:
        dequantize = producers.get(output.name)
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            continue
        quantize = producers.get(dequantize.input[0])
        if quantize is None or quantize.op_type != "QuantizeLinear" or len(consumers.get(quantize.output[0], [])) != 1:
            continue
        source = quantize.input[0]
        if source in graph_outputs or any(value.name == source for value in graph.input):
            continue
        for node in graph.node:  # the float tensor takes the output's name, everywhere it appears
            node.input[:] = [output.name if name == source else name for name in node.input]
            node.output[:] = [output.name if name == source else name for name in node.output]
        graph.node.remove(quantize)
        graph.node.remove(dequantize)
