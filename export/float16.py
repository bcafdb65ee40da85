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

    source = separate_read_outputs(model)
    del source.graph.value_info[:]  # tf2onnx's recorded types mislead the converter around the ops it keeps float32 (Resize)
    with warnings.catch_warnings():  # one warning per tiny weight clamped to fp16's range: noise, not news
        warnings.simplefilter("ignore", UserWarning)
        converted = float16.convert_float_to_float16(source, keep_io_types=True)
    align_casts(converted)
    converted.ir_version = model.ir_version
    onnx.checker.check_model(converted)
    return converted


def separate_read_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy where no graph output is also read inside the graph: each such output becomes an Identity of
    the value, and the nodes that read it read the value.

    With `keep_io_types`, the converter casts a float16 value back to float32 under the output's
    name, but nodes that read that name (a model answering both `probabilities` and their argmax)
    are converted to float16 and then get float32: ONNX Runtime refuses the graph's types.
    """
    from onnx import helper

    from export.optimize import all_nodes

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    outputs = {output.name for output in copy.graph.output}
    read = {name for node in all_nodes(copy.graph) for name in node.input} & outputs
    if not read:
        return copy
    renamed = {name: f"{name}/value" for name in read}
    for node in all_nodes(copy.graph):
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
    for node in copy.graph.node:
        for i, name in enumerate(node.output):
            if name in renamed:
                node.output[i] = renamed[name]
    copy.graph.node.extend(
        helper.make_node("Identity", [value], [name], name=f"{name}/output") for name, value in renamed.items()
    )
    return copy


def align_casts(model: onnx.ModelProto) -> int:
    """Casts to float32 whose result the converter declared float16 now cast to float16; returns how many.

    The converter retypes every float value to float16 but leaves a Cast's `to` alone: a
    Cast from an integer or bool (a mask, a token count, a comparison) to float32 then feeds
    float16 operators a float32 tensor, and ONNX Runtime refuses the graph's types.
    """
    from export.optimize import all_nodes

    declared = {value.name: value.type.tensor_type.elem_type for value in _all_value_info(model.graph)}
    aligned = 0
    for node in all_nodes(model.graph):
        if node.op_type != "Cast" or declared.get(node.output[0]) != onnx.TensorProto.FLOAT16:
            continue
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i == onnx.TensorProto.FLOAT:
                attribute.i = onnx.TensorProto.FLOAT16
                aligned += 1
    return aligned


def _all_value_info(graph: onnx.GraphProto):
    yield from graph.value_info
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                yield from _all_value_info(subgraph)
