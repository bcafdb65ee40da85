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

A model with several inputs or outputs is cut per name: each input's own chain of preprocessing layers goes
into the preprocessing graph, each output's own softmax/argmax into the tail graph. An input with no chain
(beside one with a chain) passes the transformer under its own name, as an output with no softmax passes the
output transformer (`wrappers.roles.stages`): the stage graphs take only what they cut.
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
    """The model as preprocessing, core and softmax models (see the module's doc), each input and output on its
    own; refused in one line when it is not a functional or Sequential Keras model, or has nothing to cut."""
    import keras

    whole: Any = model.keras_model
    symbolic_inputs, symbolic_outputs = _symbolic(whole, "input"), _symbolic(whole, "output")
    if whole is None or not symbolic_inputs or not symbolic_outputs:
        raise SplitError(
            f"--split cuts a functional or Sequential Keras model; {model.path} ({model.format}, inputs "
            f"{[spec.name for spec in model.inputs]}, outputs {model.output_names}) is not one: {instead}"
        )
    interface = read_interface(whole)  # the names, in the order of the flattened inputs and outputs
    input_names, output_names = [spec.name for spec in interface.inputs], list(interface.output_names)
    operations = getattr(whole, "operations", None) or whole.layers  # layers and ops (keras.ops.argmax) alike
    layers = [layer for layer in operations if not isinstance(layer, keras.layers.InputLayer)]

    # each input's chain of preprocessing layers, read forwards
    chains: dict[str, tuple[Any, Any, list]] = {}  # input name -> (its tensor, the chain's end, the chain's layers)
    firsts: list[Any] = []
    for name, start in zip(input_names, symbolic_inputs):
        tensor, chain, first = start, [], None
        while True:
            users = [layer for layer in layers if any(item is tensor for item in _inputs_of(layer))]
            first = first or (users[0] if users else None)
            if (
                len(users) != 1
                or type(users[0]).__name__ not in PREPROCESSING_LAYERS
                or any(_output_of(users[0]) is output for output in symbolic_outputs)
            ):
                break
            chain.append(users[0])
            tensor = users[0].output
        firsts.append(first)
        if chain:
            chains[name] = (start, tensor, chain)
    cut = [layer for _, _, chain in chains.values() for layer in chain]

    def producer(of) -> Any:
        return next((layer for layer in layers if layer not in cut and _output_of(layer) is of), None)

    # each output's tail, read backwards: [an int cast of] an argmax, then a softmax before it
    tails: dict[str, tuple[Any, Any, int | None, list]] = {}  # output name -> (core end, softmax layer, axis, ops)
    lasts: list[Any] = []
    for name, output in zip(output_names, symbolic_outputs):
        tail: list[Any] = []
        core_end = output
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
        lasts.append(last)
        if tail or axis is not None:
            tails[name] = (core_end, last, axis, tail)
    if not chains and not tails:
        described = ", ".join(f"{layer.name!r} ({type(layer).__name__})" for layer in firsts if layer is not None) or "none"
        ending = ", ".join(f"{layer.name!r} ({type(layer).__name__})" for layer in lasts if layer is not None) or "unknown"
        several = len(firsts) > 1 or len(lasts) > 1
        raise SplitError(
            f"{model.path} has nothing --split can cut: "
            + (
                f"its inputs' first layers {described} are none of {', '.join(PREPROCESSING_LAYERS)} and its outputs' "
                f"last {ending} no softmax or argmax"
                if several
                else f"its first layer {described} is not one of {', '.join(PREPROCESSING_LAYERS)} and its last "
                f"{ending} is no softmax or argmax"
            )
            + "; --split needs leading preprocessing layers or a trailing softmax (Softmax, or Dense/Activation with "
            f"activation='softmax') or keras.ops.argmax: {instead}"
        )

    # the tensors between the stages: where nothing is cut on a side, every name there passes an Identity
    pre_names = list(chains) or input_names
    post_names = list(tails) or output_names

    def between_in(name: str) -> str:
        return f"{name}_preprocessed" if name in pre_names else name

    def between_out(name: str) -> str:
        if name not in post_names:
            return name  # no tail: the core answers it under its own name, and it passes the post stage
        if name not in tails:
            return f"{name}_core"
        return f"{name}_logits" if tails[name][2] is not None else f"{name}_scores"

    starts = {name: (chains[name][1] if name in chains else tensor) for name, tensor in zip(input_names, symbolic_inputs)}
    ends = {name: (tails[name][0] if name in tails else tensor) for name, tensor in zip(output_names, symbolic_outputs)}

    def symbolic_input(name: str, like) -> Any:
        return keras.Input(tuple(like.shape[1:]), dtype=like.dtype, name=name)

    pre_ins = {name: symbolic_input(name, tensor) for name, tensor in zip(input_names, symbolic_inputs) if name in pre_names}
    pre_outs = {}
    for name, tensor in pre_ins.items():
        if name in chains:
            start, end, _ = chains[name]
            tensor = keras.Model(start, end, name=f"{name}_preprocess_layers")(tensor)
        pre_outs[between_in(name)] = keras.layers.Identity(name=between_in(name))(tensor)
    pre = keras.Model(pre_ins, pre_outs, name="preprocess")

    core_ins = {between_in(name): symbolic_input(between_in(name), starts[name]) for name in input_names}
    unique_ends = list({id(tensor): tensor for tensor in ends.values()}.values())
    body = keras.Model([starts[name] for name in input_names], unique_ends, name="model_layers")(
        [core_ins[between_in(name)] for name in input_names]
    )
    body = body if isinstance(body, (list, tuple)) else [body]
    core_outs = {}
    for name in output_names:
        tensor = body[next(i for i, end in enumerate(unique_ends) if end is ends[name])]
        last = tails[name][1] if name in tails else None
        if name in tails and tails[name][2] is not None and type(last).__name__ == "Dense":  # its logits stay, its softmax goes
            config = {**last.get_config(), "activation": "linear", "name": between_out(name)}
            logits = type(last).from_config(config)
            logits.build(tuple(ends[name].shape))
            logits.set_weights(last.get_weights())
            core_outs[between_out(name)] = logits(tensor)
        else:
            core_outs[between_out(name)] = keras.layers.Identity(name=between_out(name))(tensor)
    core = keras.Model(core_ins, core_outs, name="model")

    post_ins = {between_out(name): symbolic_input(between_out(name), core_outs[between_out(name)]) for name in post_names}
    post_outs = {}
    for name in post_names:
        answer = post_ins[between_out(name)]
        if name in tails:
            _, _, axis, tail = tails[name]
            if axis is not None:
                answer = keras.layers.Softmax(axis=axis, name=f"{name}_softmax")(answer)
            for operation in tail:  # made anew (they hold no weights): the model's own keep names the output may take
                answer = (
                    keras.ops.argmax(answer, axis=operation.axis, keepdims=operation.keepdims)
                    if _kind(operation) == "Argmax"
                    else keras.ops.cast(answer, operation.dtype)
                )
        post_outs[name] = keras.layers.Identity(name=name)(answer)
    post = keras.Model(post_ins, post_outs, name="postprocess")
    return Stages(
        _loaded(model, pre),
        _loaded(model, core),
        _loaded(model, post),
        [layer.name for layer in cut],
        list(
            dict.fromkeys(  # a softmax two outputs are cut at (its scores, and the argmax of them) is named once
                layer_name
                for _, last, axis, tail in tails.values()
                for layer_name in ([last.name] if axis is not None else []) + [operation.name for operation in tail]
            )
        ),
    )


def _symbolic(model, side: str) -> list:
    """A functional model's symbolic inputs or outputs, flat in the order its interface names them (a dict's keys
    sorted); a Sequential's one; none for a subclassed model or a SavedModel."""
    import keras

    if model is None:
        return []
    try:
        return keras.tree.flatten(getattr(model, side))
    except (AttributeError, ValueError):  # a Sequential loaded from a file may answer only to `inputs`/`outputs`
        try:
            return list(getattr(model, f"{side}s"))
        except (AttributeError, ValueError):
            return []


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
    the graphs chained on `feeds` (`chain`)."""
    graphs, diffs, stage_feeds = [], {}, feeds
    for label, stage in (("preprocess", stages.pre), ("model", stages.core), ("postprocess", stages.post)):
        onnx_bytes = stage.to_onnx(opset).SerializeToString()
        taken = {spec.name: stage_feeds[spec.name] for spec in stage.inputs}
        expected = stage.predict(taken)
        converted = onnx_outputs(onnx_bytes, taken)
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
        stage_feeds = {**{key: array for key, array in stage_feeds.items() if key not in taken}, **expected}
    return StageGraphs(graphs[0], graphs[1], graphs[2], diffs, chain(graphs, feeds))


def chain(graphs: list[bytes], feeds: Feeds) -> dict[str, np.ndarray]:
    """The stage graphs run in turn on `feeds`, as the split's nodes run them: each takes its inputs by name, and what
    it does not take passes on beside its answers (an input with no preprocessing, an output with no softmax)."""
    import onnx

    tensors = dict(feeds)
    for graph in graphs:
        names = [item.name for item in onnx.ModelProto.FromString(graph).graph.input]
        taken = {name: tensors.pop(name) for name in names}
        tensors.update(onnx_outputs(graph, taken))
    return tensors


def stage_files(graphs: StageGraphs) -> dict[str, bytes]:
    """The stage graphs by file name, written beside model.onnx."""
    return {PRE_FILE: graphs.pre, SPLIT_MODEL_FILE: graphs.core, POST_FILE: graphs.post}


def stage_settings() -> dict:
    """`parameters.extra` for an artifact carrying the stages (see `slipway.runtime_settings.GraphStage`)."""
    return {"preprocess": {"graph": PRE_FILE}, "postprocess": {"graph": POST_FILE}, "split_model": SPLIT_MODEL_FILE}
