"""`export convert --split`: a Keras model's own preprocessing and softmax/argmax cut into ONNX graphs of their own.

The CPU/GPU split (`render --split cpu-gpu`) serves the stages before and after the model in CPU pods of
their own. Many users keep those stages inside the model: a chain of preprocessing layers right after its
input (`Rescaling`, `Normalization`, `Resizing`, `CenterCrop`) and a softmax and/or argmax at its end (a
`Softmax` or softmax `Activation` layer, or a `Dense(activation="softmax")`; `keras.ops.argmax`, and an
integer cast of it). Here the model is cut into three Keras models sharing its layers and weights: the
preprocessing chain, the rest (a softmax Dense keeps its logits, the softmax goes), and the tail. Each is
converted like the whole model (`LoadedModel.to_onnx`) and checked against Keras on the user's rows (each
stage on the answers of the Keras stage before it), then the three ONNX graphs chained are checked against
the whole Keras model. A side with nothing to cut becomes an Identity graph, so the split always has both
CPU stages.

The tensors between the stages are named `<input>_preprocessed` and `<output>_logits` (`<output>_scores`
before an argmax without a softmax, `<output>_core` with no tail): Seldon's executor hands each node's
outputs on as the next node's inputs by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from export.convert import onnx_outputs, outputs_parity
from export.keras_io import read_interface
from export.keras_load import LoadedModel
from export.measure import Feeds
from export.tolerance import worst_beyond

PREPROCESSING_LAYERS = ("Rescaling", "Normalization", "Resizing", "CenterCrop")
SOFTMAX_KINDS = ("Softmax", "Activation", "Dense")
PRE_FILE, SPLIT_MODEL_FILE, POST_FILE = "preprocess.onnx", "split-model.onnx", "postprocess.onnx"


class SplitError(ValueError):
    """The model cannot be cut into stages; the message names the layer and what --split needs."""


@dataclass
class Stages:
    """The three Keras models, in order, and what was cut into the outer two (layer names, for the report)."""

    pre: LoadedModel
    core: LoadedModel
    post: LoadedModel
    pre_layers: list[str]
    post_layers: list[str]  # the softmax layer and/or the argmax (and its cast) cut after the model


@dataclass
class StageGraphs:
    """The stages as ONNX, each stage's parity against Keras, and the chained graphs' against the whole model."""

    pre: bytes
    core: bytes
    post: bytes
    stage_diffs: dict[str, float]  # stage -> largest abs difference from its Keras stage
    chained: dict[str, np.ndarray]  # the three graphs chained, on the user's rows, by output name


def _inputs_of(layer) -> list:
    import keras

    try:
        return keras.tree.flatten(layer.input)
    except (AttributeError, ValueError):  # a layer called more than once has no single input: never cut it
        return [None]


def _output_of(layer):
    try:
        return layer.output
    except (AttributeError, ValueError):
        return None


def _softmax_axis(layer) -> int | None:
    """The axis a trailing layer applies softmax over, or None when it applies none."""
    kind, config = type(layer).__name__, layer.get_config()
    if kind == "Softmax":
        axis = config.get("axis", -1)
        return axis if isinstance(axis, int) else None
    if kind in ("Activation", "Dense") and config.get("activation") == "softmax":
        return -1
    return None


WITHOUT_SPLIT = "convert it without --split"  # what a refusal tells the user to do instead (variants says its own)


def cut_stages(model: LoadedModel, instead: str = WITHOUT_SPLIT) -> Stages:
    """The model as preprocessing, core and softmax models (see the module's doc); refused in one line when
    it is not a one-input, one-output functional or Sequential Keras model, or has nothing to cut."""
    import keras

    whole: Any = model.keras_model
    try:
        symbolic_inputs, symbolic_outputs = list(whole.inputs), list(whole.outputs)
    except (AttributeError, ValueError):
        symbolic_inputs = symbolic_outputs = []
    if whole is None or len(symbolic_inputs) != 1 or len(symbolic_outputs) != 1:
        raise SplitError(
            f"--split cuts a functional or Sequential Keras model with one input and one output; {model.path} "
            f"({model.format}, inputs {[spec.name for spec in model.inputs]}, outputs {model.output_names}) is not "
            f"one: {instead}"
        )
    operations = getattr(whole, "operations", None) or whole.layers  # layers and ops (keras.ops.argmax) alike
    layers = [layer for layer in operations if not isinstance(layer, keras.layers.InputLayer)]
    tensor, pre_layers, first = symbolic_inputs[0], [], None
    while True:
        users = [layer for layer in layers if any(item is tensor for item in _inputs_of(layer))]
        first = first or (users[0] if users else None)
        if len(users) != 1 or type(users[0]).__name__ not in PREPROCESSING_LAYERS or _output_of(users[0]) is symbolic_outputs[0]:
            break
        pre_layers.append(users[0])
        tensor = users[0].output

    def producer(of) -> Any:
        return next((layer for layer in layers if layer not in pre_layers and _output_of(layer) is of), None)

    # the tail, read backwards from the output: [an int cast of] an argmax, then a softmax before it
    tail: list[Any] = []
    core_end = symbolic_outputs[0]
    last: Any = producer(core_end)
    if _kind(last) == "Cast" and _kind(producer(_single_input(last))) == "Argmax":
        tail.insert(0, last)
        core_end = _single_input(last)
        last = producer(core_end)
    if _kind(last) == "Argmax" and _single_input(last) is not None:
        tail.insert(0, last)
        core_end = _single_input(last)
        last = producer(core_end)
    axis = _softmax_axis(last) if _kind(last) in SOFTMAX_KINDS and _single_input(last) is not None else None
    if axis is not None:
        core_end = last.input
    if not pre_layers and not tail and axis is None:
        described = f"{first.name!r} ({type(first).__name__})" if first is not None else "none"
        ending = f"{last.name!r} ({type(last).__name__})" if last is not None else "unknown"
        raise SplitError(
            f"{model.path} has nothing --split can cut: its first layer {described} is not one of "
            f"{', '.join(PREPROCESSING_LAYERS)} and its last {ending} is no softmax or argmax; --split needs leading "
            "preprocessing layers or a trailing softmax (Softmax, or Dense/Activation with activation='softmax') "
            f"or keras.ops.argmax: {instead}"
        )
    input_name, output_name = model.inputs[0].name, model.output_names[0]
    between_in = f"{input_name}_preprocessed"
    between_out = f"{output_name}_logits" if axis is not None else f"{output_name}_scores" if tail else f"{output_name}_core"

    pre_in = keras.Input(tuple(symbolic_inputs[0].shape[1:]), dtype=symbolic_inputs[0].dtype, name=input_name)
    pre_body = keras.Model(symbolic_inputs[0], tensor, name="preprocess_layers")(pre_in) if pre_layers else pre_in
    pre = keras.Model(pre_in, keras.layers.Identity(name=between_in)(pre_body), name="preprocess")

    core_in = keras.Input(tuple(tensor.shape[1:]), dtype=tensor.dtype, name=between_in)
    core_body = keras.Model(tensor, core_end, name="model_layers")(core_in) if core_end is not tensor else core_in
    if axis is not None and type(last).__name__ == "Dense":  # its logits stay in the model, its softmax goes
        config = {**last.get_config(), "activation": "linear", "name": between_out}
        logits = type(last).from_config(config)
        logits.build(tuple(core_end.shape))
        logits.set_weights(last.get_weights())
        core_out = logits(core_body)
    else:
        core_out = keras.layers.Identity(name=between_out)(core_body)
    core = keras.Model(core_in, core_out, name="model")

    post_in = keras.Input(tuple(core_out.shape[1:]), dtype=core_out.dtype, name=between_out)
    post_out = keras.layers.Softmax(axis=axis, name=f"{output_name}_softmax")(post_in) if axis is not None else post_in
    for operation in tail:  # made anew (they hold no weights): the model's own keep names the output may take
        post_out = (
            keras.ops.argmax(post_out, axis=operation.axis, keepdims=operation.keepdims)
            if _kind(operation) == "Argmax"
            else keras.ops.cast(post_out, operation.dtype)
        )
    post = keras.Model(post_in, keras.layers.Identity(name=output_name)(post_out), name="postprocess")
    return Stages(
        _loaded(model, pre),
        _loaded(model, core),
        _loaded(model, post),
        [layer.name for layer in pre_layers],
        ([last.name] if axis is not None else []) + [operation.name for operation in tail],
    )


def _kind(operation) -> str | None:
    return type(operation).__name__ if operation is not None else None


def _single_input(operation):
    """The one tensor an operation was called on, or None (several inputs, or called more than once)."""
    if operation is None:
        return None
    inputs = _inputs_of(operation)
    return inputs[0] if len(inputs) == 1 else None


def _loaded(model: LoadedModel, keras_model) -> LoadedModel:
    interface = read_interface(keras_model)
    return LoadedModel(model.path, model.format, interface.inputs, interface.output_names, keras_model, interface=interface)


def convert_stages(
    stages: Stages, feeds: Feeds, opset: int, tolerance: float, instead: str = f"{WITHOUT_SPLIT}, or raise --parity-tolerance"
) -> StageGraphs:
    """Each stage to ONNX, checked on the answers of the Keras stage before it (`export.tolerance`'s rule); then
    the graphs chained on `feeds`."""
    graphs, diffs, stage_feeds = [], {}, feeds
    for label, stage in (("preprocess", stages.pre), ("model", stages.core), ("postprocess", stages.post)):
        onnx_bytes = stage.to_onnx(opset).SerializeToString()
        expected = stage.predict(stage_feeds)
        converted = onnx_outputs(onnx_bytes, stage_feeds)
        parity = outputs_parity(expected, converted)
        beyond = worst_beyond(expected, converted, tolerance)
        if beyond is not None:
            output, row, diff, limit = beyond
            raise SplitError(
                f"the {label} stage's ONNX graph answers beyond the tolerance, worst at output {output!r}, row {row}: "
                f"abs diff {diff:.2e} (allowed {limit:.1e}); nothing was written: {instead}"
            )
        diffs[label] = parity.max_abs_diff
        graphs.append(onnx_bytes)
        stage_feeds = expected  # named like the next stage's input
    chained = feeds
    for onnx_bytes in graphs:
        chained = onnx_outputs(onnx_bytes, chained)
    return StageGraphs(graphs[0], graphs[1], graphs[2], diffs, chained)


def stage_files(graphs: StageGraphs) -> dict[str, bytes]:
    """The stage graphs by file name, written beside model.onnx."""
    return {PRE_FILE: graphs.pre, SPLIT_MODEL_FILE: graphs.core, POST_FILE: graphs.post}


def stage_settings() -> dict:
    """`parameters.extra` for an artifact carrying the stages (see `slipway.runtime_settings.GraphStage`)."""
    return {"preprocess": {"graph": PRE_FILE}, "postprocess": {"graph": POST_FILE}, "split_model": SPLIT_MODEL_FILE}
