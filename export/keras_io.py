"""How a Keras model is called, read from the model itself: the structure and the names of its inputs and outputs.

Keras 3 builds a multi-input model from a dict of named inputs as readily as from a list, and
a model may answer with a dict, a list or one tensor; a subclassed model has no symbolic inputs
at all, only the shapes it was built with. Everything that converts, predicts or times a Keras
model calls it through `KerasInterface.call`: tensors in flat input order go in, packed into the
structure the model was built with, and the answers come out by the names the user gave them
(a dict output's keys, else the output layers' names). Fine-tuning packs its rows and targets
the same way (`pack_inputs`, `pack_outputs`).

What cannot become an ONNX graph (text layers, string or ragged inputs) is refused here, before
anything is traced, in one line naming the layer or input and what to send instead.

Only public Keras APIs are read: a functional model's `input` and `output` (the structures it
was built from) and `output_names`, a Sequential's `inputs` and `layers`, a subclassed model's
`get_build_config()`, `input_dtype` and `compute_output_spec`.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import numpy as np

from export import tf_env  # noqa: F401
from export.input_spec import InputSpec
from slipway.cli import first_line

# Layers that map strings to numbers: ONNX graphs (and tf2onnx) take numbers only.
TEXT_LAYERS = ("TextVectorization", "StringLookup")
TEXT_FIX = (
    "move it into a pre-processing stage before the model (vectorize the text there) and convert the model "
    "that takes its integer tokens"
)
# Layers over numbers that still have no ONNX form: a hash table, a hash taken of the numbers' text.
TABLE_LAYERS = {
    "IntegerLookup": (
        "looks its values up in a hash table, which an ONNX graph cannot hold: map the values to indices in a "
        "pre-processing stage before the model (a dict, or np.searchsorted over the vocabulary) and convert the "
        "model that takes the indices"
    ),
    "Hashing": (
        "hashes the text of its values, which an ONNX graph cannot: hash in a pre-processing stage before the "
        "model and convert the model that takes the bin indices"
    ),
}
RAGGED_FIX = (
    "pad the rows to one length before the model (keras.Input(ragged=False), with a mask or a lengths input if it needs one)"
)


class KerasInterfaceError(ValueError):
    """The model cannot be called as an ONNX graph would be (text, ragged or unreadable inputs); the message says what to do."""


@dataclass(frozen=True)
class KerasInterface:
    """A Keras model's inputs (flat, by name) and outputs (flat, by name), and the structure its inputs are packed into."""

    inputs: list[InputSpec]
    output_names: list[str]
    structure: object  # the model's input structure with a 0 per tensor: a dict, a list, or 0 for a single tensor
    output_structure: object = 0  # the same for its outputs (what `fit` wants its targets packed as)

    def pack_inputs(self, arrays) -> object:
        """Arrays (or tensors) in `inputs` order, packed as the model takes them (for `fit`, `predict`, a call)."""
        import keras

        return keras.tree.pack_sequence_as(self.structure, list(arrays))

    def pack_outputs(self, arrays) -> object:
        """Arrays in `output_names` order (targets), packed as the model answers."""
        import keras

        return keras.tree.pack_sequence_as(self.output_structure, list(arrays))

    def call(self, model, tensors) -> dict:
        """`model` on `tensors` (flat, in `inputs` order), packed as it was built; its answers by output name."""
        import keras

        answers = keras.tree.flatten(model(self.pack_inputs(tensors), training=False))
        if len(answers) != len(self.output_names):
            raise KerasInterfaceError(
                f"the model answered with {len(answers)} outputs, not the {len(self.output_names)} "
                f"({', '.join(self.output_names)}) its structure declares: save it with fixed outputs"
            )
        return dict(zip(self.output_names, answers))


def read_interface(model) -> KerasInterface:
    """The inputs, outputs and calling structure of a functional, Sequential or subclassed Keras model."""
    import keras

    refuse_text_layers(model)
    if isinstance(model, keras.Sequential):
        return _sequential(model)
    if _is_functional(model):
        return _functional(model)
    return _subclassed(model)


def _is_functional(model) -> bool:
    """A functional model keeps the symbolic inputs it was built from; a subclassed one has none (no `inputs`)."""
    try:
        return bool(model.inputs)
    except AttributeError:
        return False


def _functional(model) -> KerasInterface:
    import keras

    built_inputs = keras.tree.flatten_with_path(model.input)
    layer_of = {id(layer.output): layer.name for layer in model.layers if isinstance(layer, keras.layers.InputLayer)}
    names = [
        str(path[-1]) if path and isinstance(path[-1], str) else layer_of.get(id(tensor)) or _tensor_name(tensor, i)
        for i, (path, tensor) in enumerate(built_inputs)
    ]
    inputs = [_spec(name, tensor) for name, (_, tensor) in zip(names, built_inputs)]
    built_outputs = keras.tree.flatten_with_path(model.output)
    layer_names = list(getattr(model, "output_names", None) or [])
    outputs = []
    for i, (path, _) in enumerate(built_outputs):
        if path and isinstance(path[-1], str):
            outputs.append("_".join(str(part) for part in path))  # a dict output: the user's key (keys joined if nested)
        elif i < len(layer_names):
            outputs.append(layer_names[i])
        else:
            outputs.append(f"output_{i}")
    return KerasInterface(
        inputs,
        _unique(outputs),
        keras.tree.map_structure(lambda _: 0, model.input),
        keras.tree.map_structure(lambda _: 0, model.output),
    )


def _sequential(model) -> KerasInterface:
    try:
        tensors = list(model.inputs)
    except (AttributeError, ValueError):  # built without keras.Input: only its build shape is known
        return _subclassed(model)
    if len(tensors) != 1:
        raise KerasInterfaceError(
            f"Sequential model {model.name!r} has {len(tensors)} inputs: a Sequential takes one; "
            "build it with keras.Model(inputs, outputs) instead"
        )
    return KerasInterface([_spec(_tensor_name(tensors[0], 0), tensors[0])], [model.layers[-1].name], 0, 0)


def _subclassed(model) -> KerasInterface:
    """A model with its own `call()`: inputs from the shapes it was built with (named after `call`'s first
    argument, or the keys of a dict it was built on), outputs from a symbolic call on them."""
    import keras

    config = model.get_build_config() if model.built else None
    shapes = (config or {}).get("input_shape")
    if shapes is None and config and "shapes_dict" in config:
        shapes = {key.removesuffix("_shape"): value for key, value in config["shapes_dict"].items()}
    if shapes is None:
        raise KerasInterfaceError(
            f"model {model.name!r} ({type(model).__name__}) was saved before it was built, so its input "
            "shapes are unknown: call it once on a batch (or model.build(shape)) before saving it"
        )
    argument = _first_argument(model)

    def is_shape(node) -> bool:
        return isinstance(node, (list, tuple)) and all(d is None or isinstance(d, int) for d in node)

    if is_shape(shapes):
        structure: object = 0
        named = [(argument, tuple(shapes))]
    elif isinstance(shapes, dict) and all(is_shape(v) for v in shapes.values()):
        structure = {key: 0 for key in shapes}
        named = [(str(key), tuple(shapes[key])) for key in sorted(shapes)]
    elif isinstance(shapes, (list, tuple)) and all(is_shape(v) for v in shapes):
        structure = [0] * len(shapes)
        named = [(f"{argument}_{i}", tuple(shape)) for i, shape in enumerate(shapes)]
    else:
        raise KerasInterfaceError(
            f"model {model.name!r} was built on inputs shaped {shapes!r}: Slipway calls models on one "
            "tensor, a list or a flat dict of tensors; wrap it in a keras.Model with such inputs"
        )
    dtype = np.dtype(str(model.input_dtype))
    inputs = [InputSpec(name, dtype, (None, *shape[1:]), dtype_guessed=True) for name, shape in named]
    symbolic = keras.tree.pack_sequence_as(structure, [keras.KerasTensor(spec.shape, str(spec.dtype)) for spec in inputs])
    try:
        answers = model.compute_output_spec(symbolic)
    except Exception as err:  # the user's call() may fail on symbolic tensors in any way
        raise KerasInterfaceError(
            f"model {model.name!r} ({type(model).__name__}) cannot be called on its build shapes "
            f"{[spec.describe() for spec in inputs]} ({type(err).__name__}: {first_line(err)}): "
            "save it as a functional keras.Model or export it as a SavedModel (model.export(path))"
        ) from err
    paths = keras.tree.flatten_with_path(answers)
    outputs = [
        "_".join(str(part) for part in path) if path and isinstance(path[-1], str) else f"output_{i}"
        for i, (path, _) in enumerate(paths)
    ]
    return KerasInterface(inputs, _unique(outputs), structure, keras.tree.map_structure(lambda _: 0, answers))


def _first_argument(model) -> str:
    """The name of `call()`'s first argument (what the user calls the model's input), `inputs` when it has none."""
    try:
        parameters = [
            p for p in inspect.signature(model.call).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return "inputs"
    return parameters[0].name if parameters else "inputs"


def _spec(name: str, tensor) -> InputSpec:
    """An input's name, numpy dtype and shape; text and ragged inputs are refused (ONNX has neither)."""
    dtype = str(tensor.dtype)
    if dtype == "string":
        raise KerasInterfaceError(f"input {name!r} takes strings, which an ONNX graph cannot: {TEXT_FIX}")
    if getattr(tensor, "ragged", False):
        raise KerasInterfaceError(f"input {name!r} is ragged, which an ONNX graph cannot take: {RAGGED_FIX}")
    if getattr(tensor, "sparse", False):
        raise KerasInterfaceError(
            f"input {name!r} is sparse, which an ONNX graph cannot take: pass it dense (keras.Input(sparse=False))"
        )
    return InputSpec(name, np.dtype(dtype), tuple(tensor.shape))


def _tensor_name(tensor, index: int) -> str:
    """The name a Keras input was given (keras.Input(name=...)); Keras 3 keeps it on the symbolic tensor. An unnamed
    input's tensor is named by a process-wide counter (`keras_tensor_543`), which is why a functional model's inputs
    are named after their InputLayer first: the name its file keeps, that loading it gives the tensor too."""
    return getattr(tensor, "name", None) or f"input_{index}"


def _unique(names: list[str]) -> list[str]:
    """Output names as given; a name used twice (two outputs of one layer) gets its position appended."""
    return [name if names.count(name) == 1 else f"{name}_{i}" for i, name in enumerate(names)]


def all_layers(model) -> list:
    """Every layer of the model, nested models' own layers included (depth first)."""
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        if layer is not model:
            found.extend(all_layers(layer))
    return found


def layer_names(model) -> set[str]:
    """The names of every layer of the model (nested ones too): what a traced op's name scope is matched against."""
    return {layer.name for layer in all_layers(model)}


def refuse_text_layers(model) -> None:
    """A layer that maps strings to numbers, or numbers through a hash table or a hash, has no ONNX form: refuse it
    by name, with the fix."""
    text = [layer for layer in all_layers(model) if type(layer).__name__ in TEXT_LAYERS]
    if text:
        named = ", ".join(f"{type(layer).__name__} layer {layer.name!r}" for layer in text)
        raise KerasInterfaceError(f"{named} works on strings, which an ONNX graph cannot: {TEXT_FIX}")
    tables = [layer for layer in all_layers(model) if type(layer).__name__ in TABLE_LAYERS]
    if tables:
        layer = tables[0]
        others = f" (and {len(tables) - 1} more such layer(s))" if len(tables) > 1 else ""
        raise KerasInterfaceError(f"{type(layer).__name__} layer {layer.name!r}{others} {TABLE_LAYERS[type(layer).__name__]}")


def layer_of(op_name: str, layer_names: set[str]) -> str | None:
    """The innermost layer an op belongs to, from its name scope (`functional_1/dense_2/MatMul` -> `dense`)."""
    found = None
    for part in op_name.split("/"):
        bare = re.sub(r"_\d+$", "", part)
        if part in layer_names:
            found = part
        elif bare in layer_names:
            found = bare
    return found
