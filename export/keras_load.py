"""Load the user's own trained model (.keras, .h5 or a SavedModel folder) and describe its inputs and outputs.

Conversion, the parity check and the variants all need the same three things from a
model, whatever format it came in: its inputs by name (dtype and shape, batch left
open), its outputs by name, and its answers on rows the user sends. A SavedModel is
taken through its serving signature (no Python classes needed); a .keras or .h5 file
through Keras, which needs every custom layer's class: those are named before Keras
is asked, so a missing one is one line saying how to pass it, not a deserialisation
traceback. A Keras model is then called the way it was built (a dict, a list or one
tensor; `export.keras_io`), and what no ONNX graph can take (text layers, string or
ragged inputs) is refused in one line.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from export import tf_env  # noqa: F401
from export.input_spec import InputSpec
from export.keras_io import RAGGED_FIX, TEXT_FIX, KerasInterface, KerasInterfaceError, layer_names, read_interface
from export.measure import Feeds
from slipway.cli import first_line

Format = Literal["keras", "h5", "savedmodel"]
SERVING_SIGNATURE = "serving_default"
PREDICT_BATCH = 256
# Classes a saved config names that are Keras' own, not the user's.
KERAS_CONTAINERS = {"Functional", "Sequential", "Model"}
CUSTOM_OBJECTS_HELP = "--custom-objects module:attr (a dict {name: class} or a function returning one; module may be a .py path)"


class ModelLoadError(ValueError):
    """The file is not a model Slipway can read, or needs classes it was not given; the message says what to pass."""


@dataclass
class LoadedModel:
    """A trained model in memory, whatever it was saved as, with its interface read from the model itself."""

    path: Path
    format: Format
    inputs: list[InputSpec]
    output_names: list[str]
    keras_model: object | None  # None for a SavedModel: answers come from its serving signature
    signature: Callable[..., Mapping[str, Any]] | None = None
    owner: object | None = None  # a SavedModel's loaded object: its variables live as long as it does
    interface: KerasInterface | None = None  # how the Keras model is called (None for a SavedModel)

    def tensor_specs(self) -> list:
        """One `tf.TensorSpec` per input, named like it, batch dimension open (dynamic batch in ONNX)."""
        import tensorflow as tf

        return [tf.TensorSpec((None, *spec.shape[1:]), tf.as_dtype(spec.dtype), name=spec.name) for spec in self.inputs]

    def call(self, *tensors) -> dict:
        """The model on tensors in input order, as a dict of outputs by name (what the ONNX graph is named after)."""
        if self.keras_model is None:
            assert self.signature is not None, "a SavedModel is loaded with its serving signature"
            answers = self.signature(**{spec.name: tensor for spec, tensor in zip(self.inputs, tensors)})
            return {name: answers[name] for name in self.output_names}
        assert self.interface is not None, "a Keras model is loaded with its interface"
        return self.interface.call(self.keras_model, tensors)

    def layer_names(self) -> set[str]:
        """The Keras model's layer names (none for a SavedModel): refusals name the layer an op belongs to."""
        return layer_names(self.keras_model) if self.keras_model is not None else set()

    def to_onnx(self, opset: int):
        """The model as an ONNX ModelProto, its inputs and outputs named as the model names them."""
        from export.convert import function_to_onnx

        return function_to_onnx(
            self.call, self.tensor_specs(), opset, output_order=self.output_names, layer_names=self.layer_names()
        )

    def predict(self, feeds: Feeds, batch_size: int = PREDICT_BATCH) -> dict[str, np.ndarray]:
        """Every output over all rows, in chunks, by name."""
        import tensorflow as tf

        call = tf.function(self.call, input_signature=self.tensor_specs(), reduce_retracing=True)
        total = len(next(iter(feeds.values())))
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in self.output_names}
        for start in range(0, total, batch_size):
            answers = call(*[tf.convert_to_tensor(feeds[spec.name][start : start + batch_size]) for spec in self.inputs])
            for name in self.output_names:
                chunks[name].append(np.asarray(answers[name]))
        return {name: np.concatenate(parts) for name, parts in chunks.items()}


def default_name(model_path: Path) -> str:
    """A model name for /v2/models/<name> from the file or folder name (`my model.keras` -> `my-model`)."""
    stem = Path(model_path).name.removesuffix(".keras").removesuffix(".h5")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")[:63] or "model"


def model_format(path: Path) -> Format:
    """Which of the three formats `path` is, from what is on disk (cheap: before TensorFlow is imported)."""
    path = Path(path)
    if path.is_dir():
        if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
            return "savedmodel"
        raise ModelLoadError(
            f"{path} is a folder without saved_model.pb: pass a SavedModel folder (model.export(path)), a .keras or an .h5 file"
        )
    if not path.is_file():
        raise ModelLoadError(f"no model at {path}: pass a .keras file, an .h5 file or a SavedModel folder")
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(b"PK"):
        return "keras"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "h5"
    raise ModelLoadError(
        f"{path} is not a model: expected a .keras file (a zip archive), an .h5 file (HDF5) or a SavedModel folder"
    )


def saved_config(path: Path, fmt: Format) -> dict | None:
    """The model's architecture as saved (the JSON Keras rebuilds it from), or None when there is none to read."""
    try:
        if fmt == "keras":
            with zipfile.ZipFile(path) as archive:
                return json.loads(archive.read("config.json"))
        import h5py

        with h5py.File(path, "r") as handle:
            text = handle.attrs.get("model_config")
        if text is None:
            return None
        return json.loads(text if isinstance(text, str) else text.decode())
    except (KeyError, OSError, ValueError, zipfile.BadZipFile) as err:
        raise ModelLoadError(f"{path} is not a Keras model ({first_line(err)}): save it with model.save('model.keras')") from err


def custom_layers(config: dict) -> dict[str, str | None]:
    """Class names in a saved config that are not Keras' own, with the module the config names (if any):
    the classes loading will need."""
    import keras

    found: dict[str, str | None] = {}

    def visit(node) -> None:
        if isinstance(node, dict):
            name, module = node.get("class_name"), node.get("module")
            if isinstance(name, str) and "config" in node:
                bare = name.split(">")[-1]
                if bare.startswith("__"):
                    pass  # Keras' own markers (`__keras_tensor__`, `__tuple__`, ...)
                elif module is not None and module != "builtins" and not str(module).startswith("keras"):
                    found[bare] = module  # the .keras format names the user's module
                elif ">" in name or (module is None and bare not in KERAS_CONTAINERS and not _keras_object(bare)):
                    found.setdefault(bare, None)  # .h5: a registered "package>Name", or a name Keras does not know
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(config)
    return dict(sorted(found.items()))


def _keras_object(name: str) -> bool:
    """Is `name` a class Keras itself knows (an optimizer, a loss, an initializer, a dtype policy...)?"""
    import keras

    families = (
        keras.layers,
        keras.losses,
        keras.metrics,
        keras.optimizers,
        keras.initializers,
        keras.regularizers,
        keras.constraints,
        keras.activations,
        keras.dtype_policies,
        keras.optimizers.schedules,
    )
    return any(hasattr(family, name) for family in families)


def read_custom_objects(spec: str) -> dict:
    """`module:attr` (or `path/to/file.py:attr`) as the dict of custom objects Keras loads with."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ModelLoadError(f"--custom-objects {spec!r} is not module:attr: pass e.g. --custom-objects my_layers:CUSTOM_OBJECTS")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            loader_spec = importlib.util.spec_from_file_location(file.stem, file)
            if loader_spec is None or loader_spec.loader is None or not file.is_file():
                raise FileNotFoundError(f"no file {file}")
            module = importlib.util.module_from_spec(loader_spec)
            loader_spec.loader.exec_module(module)
        else:
            if str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
        found = getattr(module, attr)
    except Exception as err:  # the user's module can fail in any way while it is imported
        raise ModelLoadError(
            f"cannot import --custom-objects {spec} ({type(err).__name__}: {first_line(err)}): "
            "pass module:attr of an importable module or a .py file"
        ) from err
    if callable(found) and not isinstance(found, dict) and not isinstance(found, type):
        found = found()
    if not isinstance(found, dict) or not all(isinstance(key, str) for key in found):
        raise ModelLoadError(
            f"--custom-objects {spec} is a {type(found).__name__}: it must be a dict {{name: class}} or a function returning one"
        )
    return found


def load_model(path: Path, *, custom_objects: dict | None = None, signature: str | None = None) -> LoadedModel:
    """Read a .keras file, an .h5 file or a SavedModel folder (through `signature`, else its serving one);
    refuse (one line) what cannot be read."""
    path = Path(path)
    fmt = model_format(path)
    if fmt == "savedmodel":
        return _load_savedmodel(path, signature)
    if signature is not None:
        raise ModelLoadError(
            f"--signature {signature} chooses among a SavedModel's signatures; {path} is a {fmt} file, "
            "which has none: leave --signature out"
        )
    config = saved_config(path, fmt)
    if config is None:
        raise ModelLoadError(f"{path} holds weights only, no architecture: save the whole model with model.save('model.keras')")
    given = set(custom_objects or {})
    missing = [
        name
        for name, module in custom_layers(config).items()
        if name not in given and not _registered(name) and not _importable(module)
    ]
    if missing:
        raise ModelLoadError(
            f"{path} uses custom layers Keras cannot rebuild without their classes ({', '.join(missing)}): "
            f"pass {CUSTOM_OBJECTS_HELP}"
        )
    import keras

    try:
        with keras.saving.custom_object_scope(custom_objects or {}):
            try:
                model = keras.models.load_model(path, custom_objects=custom_objects)
            except Exception:
                # Keras 3 cannot rebuild some losses and metrics compiled into legacy .h5 files; the
                # architecture and weights still load, and the loss can be given with --loss.
                model = keras.models.load_model(path, custom_objects=custom_objects, compile=False)
    except Exception as err:  # Keras raises many types for a bad file
        raise ModelLoadError(f"cannot read {path} as a Keras model ({type(err).__name__}: {first_line(err)})") from err
    try:
        interface = read_interface(model)
    except KerasInterfaceError as err:
        raise ModelLoadError(f"cannot convert {path}: {err}") from err
    return LoadedModel(path, fmt, interface.inputs, interface.output_names, model, interface=interface)


def _importable(module: str | None) -> bool:
    """Can Keras import the module a .keras file names for a class (it does so itself while loading)?"""
    if not module or module == "__main__":
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _registered(name: str) -> bool:
    import keras

    return any(key.split(">")[-1] == name for key in keras.saving.get_custom_objects())


def _load_savedmodel(path: Path, chosen: str | None = None) -> LoadedModel:
    """A SavedModel through `chosen`, else its serving signature, else its only one."""
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as err:
        raise ModelLoadError(f"cannot read {path} as a SavedModel ({type(err).__name__}: {first_line(err)})") from err
    names = sorted(loaded.signatures)
    if not names:
        raise ModelLoadError(f"SavedModel {path} has no signatures to call: export it with model.export(path)")
    if chosen is None:
        chosen = SERVING_SIGNATURE if SERVING_SIGNATURE in names or len(names) > 1 else names[0]
    signature = loaded.signatures.get(chosen)
    if signature is None:
        raise ModelLoadError(f"SavedModel {path} has no {chosen!r} signature: pass --signature with one of {', '.join(names)}")
    _, by_name = signature.structured_input_signature
    for name, spec in by_name.items():
        if not isinstance(spec, tf.TensorSpec):  # a RaggedTensorSpec or SparseTensorSpec
            raise ModelLoadError(
                f"cannot convert {path}: input {name!r} is a {type(spec).__name__.removesuffix('Spec')}, which an "
                f"ONNX graph cannot take: {RAGGED_FIX}"
            )
        if spec.dtype == tf.string:
            raise ModelLoadError(f"cannot convert {path}: input {name!r} takes strings, which an ONNX graph cannot: {TEXT_FIX}")
    inputs = [
        InputSpec(name, np.dtype(spec.dtype.as_numpy_dtype), tuple(spec.shape.as_list()))
        for name, spec in sorted(by_name.items())
    ]
    outputs = sorted(signature.structured_outputs)
    return LoadedModel(path, "savedmodel", inputs, outputs, None, signature, loaded)
