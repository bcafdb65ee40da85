"""Give a float image graph the input clients already have: uint8 pixels, NHWC.

A 224x224x3 image is 150 kB as uint8 and 600 kB as float32; on a GPU pod the bytes and
their decoding on the event loop are what saturates first (reports/gpu.md). The scaling
and the mean/std normalisation the client did move into the graph (Cast -> Mul -> Sub ->
Div, and a Transpose for NCHW graphs), joined in front of the original input with
`onnx.compose`, so the rest of the graph is untouched and the input keeps its name.
The numbers are `slipway.runtime_settings.ImagePreprocessing`'s (the same scale, mean, std the
runtime applies to decoded images), so one set of settings describes both paths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto, compose, helper, numpy_helper

if TYPE_CHECKING:
    from slipway.artifact import Manifest

UINT8_DATATYPE = "UINT8"
_NORMALISED = "{}__normalised"
_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}


class Uint8InputError(ValueError):
    """The graph's input cannot take uint8 pixels: one line naming what to change."""


@dataclass(frozen=True)
class Normalisation:
    """float = (pixel * scale - mean) / std per channel: what the client did before, the graph does now."""

    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def apply(self, pixels: np.ndarray, channels_last: bool) -> np.ndarray:
        """The float input the original graph expects for uint8 `pixels` (NHWC); NCHW when not `channels_last`."""
        values = (pixels.astype(np.float32) * np.float32(self.scale) - self._per_channel(self.mean)) / self._per_channel(self.std)
        return values if channels_last or values.ndim != 4 else values.transpose(0, 3, 1, 2)

    def invert(self, values: np.ndarray, channels_last: bool) -> np.ndarray:
        """The uint8 NHWC pixels nearest to float input `values`: an artifact's input example, re-expressed."""
        if not channels_last and values.ndim == 4:
            values = values.transpose(0, 2, 3, 1)
        pixels = (values.astype(np.float32) * self._per_channel(self.std) + self._per_channel(self.mean)) / np.float32(self.scale)
        return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)

    @staticmethod
    def _per_channel(values: tuple[float, ...]) -> np.ndarray:
        return np.asarray(values, dtype=np.float32)


@dataclass(frozen=True)
class ImageInput:
    """The graph input to replace: its name, element type, shape (ints or names) and layout."""

    name: str
    elem_type: int
    shape: list
    channels_last: bool

    @property
    def channels(self) -> int:
        if len(self.shape) == 3:
            return 1
        channels = self.shape[-1] if self.channels_last else self.shape[1]
        return channels if isinstance(channels, int) else 0

    @property
    def nhwc_shape(self) -> list:
        if self.channels_last or len(self.shape) == 3:
            return list(self.shape)
        batch, channels, height, width = self.shape
        return [batch, height, width, channels]


def image_input(model: onnx.ModelProto, name: str | None = None) -> ImageInput:
    """The float image input of `model`: [N, H, W, C], [N, C, H, W] (C of 1 or 3) or [N, H, W] (grey)."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    if name is None:
        if len(inputs) != 1:
            raise Uint8InputError(
                f"the graph has {len(inputs)} inputs ({', '.join(v.name for v in inputs)}): name the image input with --input"
            )
        chosen = inputs[0]
    else:
        matches = [value for value in inputs if value.name == name]
        if not matches:
            raise Uint8InputError(f"the graph has no input {name!r}: choose one of {', '.join(v.name for v in inputs)}")
        chosen = matches[0]
    tensor = chosen.type.tensor_type
    if tensor.elem_type not in _FLOAT_TYPES:
        raise Uint8InputError(
            f"input {chosen.name!r} is {TensorProto.DataType.Name(tensor.elem_type)}, not a float image: "
            "only a float input takes uint8 pixels"
        )
    shape = [dim.dim_value if dim.HasField("dim_value") else (dim.dim_param or "N") for dim in tensor.shape.dim]
    if len(shape) == 3:
        return ImageInput(chosen.name, tensor.elem_type, shape, True)
    if len(shape) == 4 and shape[-1] in (1, 3):
        return ImageInput(chosen.name, tensor.elem_type, shape, True)
    if len(shape) == 4 and shape[1] in (1, 3):
        return ImageInput(chosen.name, tensor.elem_type, shape, False)
    raise Uint8InputError(
        f"input {chosen.name!r} has shape {shape}: uint8 pixels need an image input "
        "[N, H, W, C], [N, C, H, W] (C of 1 or 3) or [N, H, W]"
    )


def check_normalisation(normalisation: Normalisation, image: ImageInput) -> None:
    for label, values in (("mean", normalisation.mean), ("std", normalisation.std)):
        if len(values) not in (1, image.channels):
            wanted = "1 value" if image.channels <= 1 else f"1 value or {image.channels}, one per channel"
            raise Uint8InputError(
                f"--{label} has {len(values)} values; input {image.name!r} has {image.channels or 'an unknown number of'} "
                f"channel(s): pass {wanted}"
            )
    if any(value == 0 for value in normalisation.std):
        raise Uint8InputError("--std must not contain 0: the pixels are divided by it")
    if normalisation.scale <= 0:
        raise Uint8InputError(f"--scale must be positive, got {normalisation.scale}")


def with_uint8_input(model: onnx.ModelProto, normalisation: Normalisation, name: str | None = None) -> onnx.ModelProto:
    """`model` behind a graph that takes uint8 NHWC pixels under the input's name and normalises them."""
    image = image_input(model, name)
    check_normalisation(normalisation, image)
    normalised = _NORMALISED.format(image.name)
    # Constants broadcast over the last axis: the channels of the NHWC pixels.
    constants = [
        numpy_helper.from_array(np.asarray([normalisation.scale], dtype=np.float32), f"{normalised}_scale"),
        numpy_helper.from_array(np.asarray(normalisation.mean, dtype=np.float32), f"{normalised}_mean"),
        numpy_helper.from_array(np.asarray(normalisation.std, dtype=np.float32), f"{normalised}_std"),
    ]
    steps: list[tuple[str, list[str], dict[str, Any]]] = [
        ("Cast", [image.name], {"to": TensorProto.FLOAT}),
        ("Mul", [f"{normalised}_scale"], {}),
        ("Sub", [f"{normalised}_mean"], {}),
        ("Div", [f"{normalised}_std"], {}),
    ]
    if not image.channels_last and len(image.shape) == 4:
        steps.append(("Transpose", [], {"perm": [0, 3, 1, 2]}))
    if image.elem_type != TensorProto.FLOAT:
        steps.append(("Cast", [], {"to": image.elem_type}))
    nodes: list[onnx.NodeProto] = []
    previous: str | None = None
    for index, (op, operands, attributes) in enumerate(steps):
        output = normalised if index == len(steps) - 1 else f"{normalised}_{index}"
        inputs = operands if previous is None else [previous, *operands]
        nodes.append(helper.make_node(op, inputs, [output], name=f"{normalised}_{op.lower()}{index}", **attributes))
        previous = output
    front = helper.make_graph(
        nodes,
        "uint8_input",
        [helper.make_tensor_value_info(image.name, TensorProto.UINT8, image.nhwc_shape)],
        [helper.make_tensor_value_info(normalised, image.elem_type, image.shape)],
        constants,
    )
    default_opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    front_model = helper.make_model(
        front, opset_imports=list(model.opset_import) or [helper.make_opsetid("", default_opset)], ir_version=model.ir_version
    )
    body = onnx.ModelProto()
    body.CopyFrom(model)
    _rename_input(body.graph, image.name, f"{image.name}__float")
    merged = compose.merge_models(front_model, body, io_map=[(normalised, f"{image.name}__float")])
    onnx.checker.check_model(merged)
    return merged


def _rename_input(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename a graph input and every use of it (subgraphs included), so the front graph can take the old name."""
    for value in graph.input:
        if value.name == old:
            value.name = new
    _rename_uses(graph, old, new)


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if item == old else item for item in node.input]
        for attribute in node.attribute:
            for subgraph in [attribute.g, *attribute.graphs] if attribute.HasField("g") else attribute.graphs:
                _rename_uses(subgraph, old, new)


def write_uint8_artifact(source_dir: Path, out_dir: Path, normalisation: Normalisation, name: str | None = None) -> Manifest:
    """A copy of the artifact folder `source_dir` whose graph takes uint8 pixels, written atomically to `out_dir`.

    The input example is re-expressed in pixels and its outputs recomputed by the new graph;
    model-settings.json records the input (datatype UINT8, NHWC shape) and variant.json what
    the graph now does, so the manifest's digest names the new contract.
    """
    from export.package import write_artifact
    from export.pipeline import example_outputs
    from slipway.artifact import (
        INPUT_EXAMPLE_FILE,
        MANIFEST_NAME,
        MODEL_FILE,
        SETTINGS_FILE,
        VARIANT_FILE,
        load_input_example,
        verify_artifact,
    )
    from slipway.files import read_json

    source_dir, out_dir = Path(source_dir), Path(out_dir)
    verify_artifact(source_dir)
    model = onnx.load(source_dir / MODEL_FILE)
    image = image_input(model, name)
    converted = with_uint8_input(model, normalisation, image.name)
    settings = read_json(source_dir / SETTINGS_FILE, f"model settings {source_dir / SETTINGS_FILE}")
    inputs, _, labels = load_input_example(source_dir)
    inputs[image.name] = normalisation.invert(inputs[image.name], image.channels_last)
    model_bytes = converted.SerializeToString()
    lineage = read_json(source_dir / VARIANT_FILE, "variant.json") if (source_dir / VARIANT_FILE).is_file() else {}
    lineage["input"] = {
        "name": image.name,
        "datatype": UINT8_DATATYPE,
        "layout": "NHWC",
        "scale": normalisation.scale,
        "mean": list(normalisation.mean),
        "std": list(normalisation.std),
        "graph_layout": "NHWC" if image.channels_last else "NCHW",
    }
    skip = {MODEL_FILE, SETTINGS_FILE, INPUT_EXAMPLE_FILE, MANIFEST_NAME, VARIANT_FILE}
    extra_files = {
        path.relative_to(source_dir).as_posix(): path.read_bytes()
        for path in sorted(source_dir.rglob("*"))
        if path.is_file() and path.relative_to(source_dir).as_posix() not in skip
    }
    extra_files[VARIANT_FILE] = (json.dumps(lineage, indent=2, sort_keys=True) + "\n").encode()
    shape = [dim if isinstance(dim, int) else -1 for dim in image.nhwc_shape]
    return write_artifact(
        out_dir,
        onnx_bytes=model_bytes,
        name=settings["name"],
        example_inputs=inputs,
        example_outputs=example_outputs(model_bytes, inputs),
        example_labels=labels if isinstance(labels, np.ndarray) else None,
        extra_settings=(settings.get("parameters") or {}).get("extra") or {},
        extra_files=extra_files,
        inputs=[{"name": image.name, "datatype": UINT8_DATATYPE, "shape": shape}],
    )
