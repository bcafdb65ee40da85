"""fp16 weights and arithmetic with fp32 inputs and outputs: half the file, faster on GPUs.

Inputs and outputs stay float32 (`keep_io_types=True`) so clients send and receive the
same tensors as for the fp32 model. On CPUs without fp16 kernels ONNX Runtime inserts
casts and runs slower than fp32: the report shows it, and it is no reason to reject it.
"""

from __future__ import annotations

import onnx


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Convert float32 initializers and operators to float16, keeping float32 at the edges."""
    import warnings

    from onnxconverter_common import float16

    with warnings.catch_warnings():  # one warning per tiny weight clamped to fp16's range: noise, not news
        warnings.simplefilter("ignore", UserWarning)
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
    converted.ir_version = model.ir_version
    onnx.checker.check_model(converted)
    return converted
