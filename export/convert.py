"""Keras (or a SavedModel's signature) -> ONNX through a tf.function and tf2onnx, then a parity check.

`tf2onnx.convert.from_keras` breaks on Keras 3 models, so the model is wrapped in a
`tf.function` with a named input signature (batch dimension open) and a dict output:
the ONNX graph then keeps the input and output names clients use (`image` and
`probabilities` for the demo, the model's own names for the user's). tf2onnx leaves
a TensorFlow op it cannot translate in the graph under its TensorFlow name instead of
failing; such a graph is refused here, naming the ops, before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export import tf_env  # noqa: F401
from export.model import INPUT_NAME, OUTPUT_NAME
from slipway.cli import first_line

DEFAULT_OPSET = 17


class ParityError(Exception):
    """The ONNX model does not predict what the Keras model predicts."""


@dataclass(frozen=True)
class Parity:
    """How closely ONNX Runtime reproduces Keras on the same inputs."""

    samples: int
    top1_agreement: float
    max_abs_diff: float
    identical_predictions: bool
    worst_output: str | None = None  # where the largest difference is (outputs_parity): the output and its row
    worst_row: int | None = None

    def as_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "samples": self.samples,
            "top1_agreement": self.top1_agreement,
            "max_abs_diff": self.max_abs_diff,
            "identical_predictions": self.identical_predictions,
        }
        if self.worst_output is not None:
            found.update(worst_output=self.worst_output, worst_row=self.worst_row)
        return found

    def worst(self) -> str:
        """Where ONNX strays most from the source, for a refusal: `output 'score', row 17: abs diff 3.1e-02`."""
        if self.worst_output is None:
            return f"max abs diff {self.max_abs_diff:.2e}"
        return f"output {self.worst_output!r}, row {self.worst_row}: abs diff {self.max_abs_diff:.2e}"


class UnsupportedOpsError(ValueError):
    """The TensorFlow graph uses ops tf2onnx cannot translate to ONNX."""


def keras_to_onnx(
    model,
    opset: int = DEFAULT_OPSET,
    *,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    input_dtypes: list | None = None,
):
    """Convert a Keras model to an ONNX ModelProto with a dynamic batch dimension.

    The model is called the way it was built (a dict, a list or one tensor; `export.keras_io`).
    Names default to the demo's (`image` -> `probabilities`) for a model with one input and one
    output, else to the model's own input and output names; given names replace them in order.
    `input_dtypes` (in order) stand for the dtypes a subclassed model cannot tell (Keras keeps its build
    shapes, not their dtypes), as the rows it was converted with first said them.
    """
    import tensorflow as tf

    from export.keras_io import layer_names, read_interface

    interface = read_interface(model)
    inputs = input_names or ([INPUT_NAME] if len(interface.inputs) == 1 else [spec.name for spec in interface.inputs])
    outputs = output_names or ([OUTPUT_NAME] if len(interface.output_names) == 1 else interface.output_names)
    dtypes = [
        given if given is not None and spec.dtype_guessed else spec.dtype
        for spec, given in zip(interface.inputs, input_dtypes or [None] * len(interface.inputs))
    ]
    specs = [
        tf.TensorSpec((None, *spec.shape[1:]), tf.as_dtype(dtype), name=name)
        for spec, dtype, name in zip(interface.inputs, dtypes, inputs)
    ]

    def call(*tensors):
        return dict(zip(outputs, interface.call(model, tensors).values()))

    return function_to_onnx(call, specs, opset, output_order=outputs, layer_names=layer_names(model))


# TensorFlow ops that run Python (tf.py_function, tf.numpy_function): no ONNX graph can hold them.
PYTHON_OPS = {"EagerPyFunc", "PyFunc", "PyFuncStateless"}


def function_to_onnx(
    call, specs: list, opset: int = DEFAULT_OPSET, *, output_order: list[str] | None = None, layer_names: set[str] | None = None
):
    """Trace `call` (tensors in `specs` order -> dict of named outputs) and convert it with tf2onnx.

    The traced graph is frozen with only `specs` as its inputs: TensorFlow also lists the
    tensors a function captures (a small one as a constant, a large one as a placeholder)
    among a concrete function's inputs, and tf2onnx's `from_function` turns every one into
    a graph input, so an adapted `Normalization` layer's mean and variance (eager tensors,
    not variables) became inputs the caller had to feed. Here they are folded in as
    constants. What no ONNX graph can hold (Python ops, strings) is refused before tf2onnx
    runs, naming the layer (`layer_names`, matched against the ops' name scopes).
    """
    import logging

    import onnx
    import tensorflow as tf
    import tf2onnx
    from tf2onnx import tf_loader

    from export.keras_io import layer_of

    if opset < DEFAULT_OPSET:
        raise ValueError(f"opset {opset} is too old: use {DEFAULT_OPSET} or newer")
    try:
        concrete = tf.function(call, input_signature=specs).get_concrete_function()
    except Exception as err:  # the model's own code (a custom layer, call()) can fail in any way while traced
        takes = ", ".join(
            f"{spec.name}: {spec.dtype.name} [{', '.join('N' if d is None else str(d) for d in spec.shape)}]" for spec in specs
        )
        raise UnsupportedOpsError(
            f"the model fails when traced on {takes} with the batch size left open ({type(err).__name__}: "
            f"{first_line(err)}): make its layers work for any batch size (no x.shape[0] in "
            "arithmetic; use keras.ops.shape(x)[0])"
        ) from err
    refuse_unconvertible_ops(concrete, layer_names or set())
    arguments = concrete.inputs[: len(specs)]  # the signature's own inputs come first, the captures after them
    answers = concrete.structured_outputs
    order = output_order or sorted(answers)
    input_names = [tensor.name for tensor in arguments]
    output_names = [answers[name].name for name in order]
    renames = {
        **{tensor.name: spec.name for tensor, spec in zip(arguments, specs)},
        **{answers[name].name: name for name in order},
    }
    tf2onnx_log, tf_log = logging.getLogger("tf2onnx"), tf.get_logger()
    levels = tf2onnx_log.level, tf_log.level
    tf2onnx_log.setLevel(logging.CRITICAL)  # unsupported ops are reported below, in one line
    tf_log.setLevel(logging.ERROR)  # TensorFlow's deprecation notes on the v1 freezing tf2onnx uses
    try:
        with tf.device("/cpu:0"):
            frozen = tf_loader.from_function(concrete, input_names, output_names)
        rewrite_float_signbit(frozen)
        rewrite_erfc(frozen)
        allow_inlining_xla_calls(frozen)
        onnx_model, _ = tf2onnx.convert.from_graph_def(
            frozen, name=concrete.name, input_names=input_names, output_names=output_names, opset=opset, tensors_to_rename=renames
        )
    except Exception as err:  # tf2onnx and TensorFlow's freezing raise many types on graphs they cannot take
        raise UnsupportedOpsError(
            f"tf2onnx could not convert the traced model ({type(err).__name__}: {first_line(err)}): nothing "
            "was written: write custom layers with standard TensorFlow ops, or try another --opset"
        ) from err
    finally:
        tf2onnx_log.setLevel(levels[0])
        tf_log.setLevel(levels[1])
    unknown = sorted(
        {
            f"{node.op_type} in layer {where!r}" if (where := layer_of(node.name, layer_names or set())) else node.op_type
            for node in onnx_model.graph.node
            if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, node.domain)
        }
    )
    if unknown:
        raise UnsupportedOpsError(
            f"the model uses TensorFlow ops tf2onnx cannot convert to ONNX ({', '.join(unknown)}): replace them with "
            "standard ops (see https://github.com/onnx/tensorflow-onnx/blob/main/support_status.md)"
        )
    extra = sorted({tensor.name for tensor in onnx_model.graph.input} - {spec.name for spec in specs})
    if extra:  # a captured tensor left as an input: the caller could not feed it
        raise UnsupportedOpsError(
            f"the converted graph asks for inputs the model does not have ({', '.join(extra)}): a tensor "
            "the model captures was left unfolded; nothing was written (report it with the model)"
        )
    onnx_model.producer_name = "slipway"
    return onnx_model


def rewrite_float_signbit(graph_def) -> int:
    """Keras' float `signbit` as comparisons ONNX has; returns how many were rewritten.

    `keras.ops.argmax` and `argmin` on floats find -0.0 with `signbit`, which the
    TensorFlow backend writes as Bitcast(x -> int32) & INT32_MIN < 0. ONNX has no bitcast, so
    tf2onnx leaves the op unconverted and any model with an argmax inside was refused. The
    same answer, x < 0 or 1/x < 0 (1/-0.0 is -inf), uses ops ONNX has; the Less node keeps
    its name, so what reads it is untouched, and the orphaned Bitcast is pruned by tf2onnx.
    """
    import tensorflow as tf

    nodes = {node.name: node for node in graph_def.node}

    def source(name: str):
        return nodes.get(name.lstrip("^").split(":")[0])

    def constant(node, value: int) -> bool:
        return node is not None and node.op == "Const" and bool(np.all(tf.make_ndarray(node.attr["value"].tensor) == value))

    float32, int32 = tf.float32.as_datatype_enum, tf.int32.as_datatype_enum
    rewritten = 0
    for less in list(graph_def.node):
        if less.op != "Less" or len(less.input) != 2 or not constant(source(less.input[1]), 0):
            continue
        masked = source(less.input[0])
        if masked is None or masked.op != "BitwiseAnd":
            continue
        parts = [source(name) for name in masked.input]
        bitcast = next((node for node in parts if node is not None and node.op == "Bitcast"), None)
        if (
            bitcast is None
            or bitcast.attr["T"].type != float32
            or bitcast.attr["type"].type != int32
            or not any(constant(node, -(2**31)) for node in parts if node is not bitcast)
        ):
            continue
        x, base = bitcast.input[0], f"{less.name}/slipway_signbit"
        zero = tf.compat.v1.NodeDef(name=f"{base}/zero", op="Const")
        zero.attr["dtype"].type = float32
        zero.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(0.0)))
        added = [zero]
        for name, op, inputs in (
            (f"{base}/negative", "Less", [x, zero.name]),
            (f"{base}/inverse", "Reciprocal", [x]),
            (f"{base}/inverse_negative", "Less", [f"{base}/inverse", zero.name]),
        ):
            node = tf.compat.v1.NodeDef(name=name, op=op, input=inputs)
            node.attr["T"].type = float32
            added.append(node)
        less.op = "LogicalOr"
        del less.input[:]
        less.input.extend([f"{base}/negative", f"{base}/inverse_negative"])
        less.attr.clear()
        graph_def.node.extend(added)
        rewritten += 1
    return rewritten


def rewrite_erfc(graph_def) -> int:
    """TensorFlow's Erfc as 1 - Erf, which ONNX has; returns how many were rewritten.

    Keras 3's exact GELU (`gelu(approximate=False)`, the default of `keras.activations.gelu`
    and of ConvNeXt and transformer blocks) is 0.5 * x * erfc(-x / sqrt(2)); tf2onnx has no
    conversion for Erfc, so every such model was refused. The node keeps its name and dtype.
    """
    import tensorflow as tf

    rewritten = 0
    for node in list(graph_def.node):
        if node.op != "Erfc" or len(node.input) != 1:
            continue
        dtype = node.attr["T"].type
        base = f"{node.name}/slipway_erfc"
        one = tf.compat.v1.NodeDef(name=f"{base}/one", op="Const")
        one.attr["dtype"].type = dtype
        one.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.array(1, tf.dtypes.as_dtype(dtype).as_numpy_dtype)))
        erf = tf.compat.v1.NodeDef(name=f"{base}/erf", op="Erf", input=[node.input[0]])
        erf.attr["T"].type = dtype
        node.op = "Sub"
        del node.input[:]
        node.input.extend([one.name, erf.name])
        graph_def.node.extend([one, erf])
        rewritten += 1
    return rewritten


XLA_MARKS = ("_XlaMustCompile", "_noinline")


def allow_inlining_xla_calls(graph_def) -> int:
    """Let TensorFlow inline the functions Keras compiles with XLA; returns how many calls were unmarked.

    Keras' TensorFlow backend runs a grouped convolution (`Conv2D(groups=...)`, ConvNeXt's
    depthwise step) through a `tf.function(jit_compile=True)`, and TensorFlow never inlines
    a function marked for XLA: the call stayed a StatefulPartitionedCall, which tf2onnx
    cannot convert. Without the marks, the grappler pass tf2onnx runs inlines the body
    (a plain Conv2D, which converts); the answers are the same, only XLA is not asked.
    """
    unmarked = 0
    for node in graph_def.node:
        if node.op in ("PartitionedCall", "StatefulPartitionedCall") and node.attr["_XlaMustCompile"].b:
            del node.attr["_XlaMustCompile"]
            unmarked += 1
    for function in graph_def.library.function:
        if function.attr["_XlaMustCompile"].b:
            for mark in XLA_MARKS:
                if mark in function.attr:
                    del function.attr[mark]
    return unmarked


def refuse_unconvertible_ops(concrete, layer_names: set[str]) -> None:
    """Python ops (tf.py_function) and string ops have no ONNX form: one line naming the layer and the fix."""
    import tensorflow as tf

    from export.keras_io import TEXT_FIX, layer_of

    graph_def = concrete.graph.as_graph_def()
    nodes = [*graph_def.node, *(node for function in graph_def.library.function for node in function.node_def)]
    for node in nodes:
        if node.op in PYTHON_OPS:
            where = layer_of(node.name, layer_names)
            raise UnsupportedOpsError(
                f"{f'layer {where!r}' if where else f'op {node.name!r}'} runs Python (tf.py_function / tf.numpy_function, "
                f"{node.op}), which an ONNX graph cannot hold: move that step into a pre-processing stage before the model, "
                "or write it with TensorFlow ops"
            )
    for op in concrete.graph.get_operations():
        if any(tensor.dtype == tf.string for tensor in op.outputs):
            where = layer_of(op.name, layer_names)
            raise UnsupportedOpsError(
                f"{f'layer {where!r}' if where else f'op {op.name!r}'} works on strings ({op.type}), "
                f"which an ONNX graph cannot: {TEXT_FIX}"
            )


def onnx_predict(onnx_bytes: bytes, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Run the one-input ONNX model over `x` with ONNX Runtime on the CPU; its first output."""
    return onnx_outputs(onnx_bytes, {INPUT_NAME: x}, batch_size)[OUTPUT_NAME]


def onnx_outputs(onnx_bytes: bytes, feeds: dict[str, np.ndarray], batch_size: int = 256) -> dict[str, np.ndarray]:
    """Every output of the ONNX model over all rows of `feeds`, by name, with ONNX Runtime on the CPU."""
    import onnxruntime as ort

    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    total = len(next(iter(feeds.values())))
    chunks = [
        session.run(names, {key: array[start : start + batch_size] for key, array in feeds.items()})
        for start in range(0, total, batch_size)
    ]
    return {name: np.concatenate([chunk[i] for chunk in chunks]) for i, name in enumerate(names)}


def outputs_parity(source: dict[str, np.ndarray], converted: dict[str, np.ndarray]) -> Parity:
    """Parity over every output: top-1 agreement per row on the outputs that score classes (last axis > 1), the
    largest abs difference over all of them and where it is (output and row). An output only the source has,
    or one of another shape, is refused."""
    missing = sorted(set(source) - set(converted))
    if missing:
        raise ParityError(f"the ONNX graph lacks the model's outputs {missing} (it has {sorted(converted)})")
    agree = None
    rows = len(next(iter(source.values())))
    worst: tuple[float, str | None, int | None] = (0.0, None, None)  # (abs diff, output, row)
    for name, expected in source.items():
        got = converted[name]
        if expected.shape != got.shape:
            raise ParityError(
                f"the ONNX graph's output {name!r} has shape {list(got.shape)}; the model's has {list(expected.shape)}"
            )
        if expected.ndim >= 2 and expected.shape[-1] > 1:
            same = expected.reshape(rows, -1, expected.shape[-1]).argmax(-1) == got.reshape(rows, -1, expected.shape[-1]).argmax(
                -1
            )
            same = same.all(axis=1)  # a row agrees when every one of its class vectors does
            agree = same if agree is None else agree & same
        if expected.size:
            per_row = np.abs(expected.astype(np.float64) - got.astype(np.float64)).reshape(rows, -1).max(axis=1)
            row = int(per_row.argmax())
            if per_row[row] > worst[0] or worst[1] is None:
                worst = (float(per_row[row]), name, row)
    return Parity(
        samples=rows,
        top1_agreement=float(agree.mean()) if agree is not None else 1.0,
        max_abs_diff=worst[0],
        identical_predictions=bool(agree.all()) if agree is not None else True,
        worst_output=worst[1],
        worst_row=worst[2],
    )


def check_parity(keras_probabilities: np.ndarray, onnx_probabilities: np.ndarray) -> Parity:
    """Compare predictions class by class and value by value."""
    agree = keras_probabilities.argmax(axis=1) == onnx_probabilities.argmax(axis=1)
    return Parity(
        samples=len(agree),
        top1_agreement=float(agree.mean()),
        max_abs_diff=float(np.abs(keras_probabilities - onnx_probabilities).max()),
        identical_predictions=bool(agree.all()),
    )
