"""The model's interface: the pre/post-processing stages around the graph, and the inputs and outputs clients see.

The graph's own tensors are changed three ways before they are advertised: an image stage takes encoded
images (BYTES) in place of the pixel input, a top-k stage answers labels and scores in place of the scores
output, and a graph of a fixed batch size run in padded chunks takes any row count. The choices are pure
(`pick`, `batchable`, `advertised`); a wrong stage setting is refused in one line naming the graph's tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.tensor_specs import DYNAMIC, TensorSpec
from slipway.runtime_settings import ImagePreprocessing, RuntimeSettings, TopKPostprocessing
from slipway.v2_wire import BYTES
from wrappers.model.processing import LABELS_OUTPUT, SCORES_OUTPUT, ImagePreprocessor, ProcessingConfigError, TopK


@dataclass(frozen=True)
class Stages:
    """The CPU stages around the graph, and which graph input and output they take the place of."""

    preprocessor: ImagePreprocessor | None = None
    image_input: str | None = None
    topk: TopK | None = None
    scores_output: str | None = None


def pick(specs: list[TensorSpec], name: str | None, setting: str, kind: str) -> TensorSpec:
    """The tensor `setting` names, or the graph's only one when it names none."""
    if name is None:
        if len(specs) != 1:
            raise ProcessingConfigError(f"the graph has {len(specs)} {kind}s {[s.name for s in specs]}: set {setting}")
        return specs[0]
    for spec in specs:
        if spec.name == name:
            return spec
    raise ProcessingConfigError(f"{setting} {name!r} is not a graph {kind}; it has {[s.name for s in specs]}")


def configure_stages(
    config: RuntimeSettings, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec], folder: Path
) -> Stages:
    preprocessor = topk = image_input = scores_output = None
    # A GraphStage (export convert --split) is inside model.onnx already: only a split's CPU nodes run it apart.
    if isinstance(config.preprocess, ImagePreprocessing):
        spec = pick(graph_inputs, config.preprocess.input, "preprocess.input", "input")
        preprocessor, image_input = ImagePreprocessor(config.preprocess, spec), spec.name
    if isinstance(config.postprocess, TopKPostprocessing):
        spec = pick(graph_outputs, config.postprocess.output, "postprocess.output", "output")
        clash = {LABELS_OUTPUT, SCORES_OUTPUT} & {s.name for s in graph_outputs if s.name != spec.name}
        if clash:
            raise ProcessingConfigError(f"postprocess: the graph already has outputs named {sorted(clash)}")
        topk, scores_output = TopK(config.postprocess, spec, folder), spec.name
    return Stages(preprocessor, image_input, topk, scores_output)


def batchable(spec: TensorSpec, fixed_rows: int | None) -> TensorSpec:
    """Advertise any row count when fixed-size batches are run in padded chunks."""
    if fixed_rows is None:
        return spec
    return TensorSpec(spec.name, spec.datatype, (DYNAMIC, *spec.shape[1:]))


def advertised(
    graph_inputs: list[TensorSpec],
    graph_outputs: list[TensorSpec],
    fixed_rows: int | None,
    image_input: str | None,
    scores_output: str | None,
    top_k: int | None,
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs clients see: the graph's, as pre/post-processing (`top_k` labels and scores
    where a top-k stage runs) and padded batching change them."""
    inputs = [batchable(spec, fixed_rows) for spec in graph_inputs if spec.name != image_input]
    if image_input is not None:
        inputs.insert(0, TensorSpec(image_input, BYTES, (DYNAMIC,)))
    outputs = [batchable(spec, fixed_rows) for spec in graph_outputs if spec.name != scores_output]
    if top_k is not None:
        outputs += [TensorSpec(LABELS_OUTPUT, BYTES, (DYNAMIC, top_k)), TensorSpec(SCORES_OUTPUT, "FP32", (DYNAMIC, top_k))]
    return inputs, outputs


def graph_outputs_for(wanted: list[str], graph_output_names: list[str], scores_output: str | None) -> set[str]:
    """The graph outputs a request needs: those it asks for, and the scores behind labels and scores."""
    needed = {name for name in wanted if name in graph_output_names}
    if scores_output is not None and {LABELS_OUTPUT, SCORES_OUTPUT} & set(wanted):
        needed.add(scores_output)
    return needed


@dataclass(frozen=True)
class Interface:
    """What a model serves: its stages, and the inputs and outputs it advertises (`advertised`)."""

    stages: Stages
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]


def interface(
    config: RuntimeSettings, graph_inputs: list[TensorSpec], graph_outputs: list[TensorSpec], fixed_rows: int | None, folder: Path
) -> Interface:
    """The stages the settings ask for (`configure_stages`) and what clients then see."""
    stages = configure_stages(config, graph_inputs, graph_outputs, folder)
    top_k = config.postprocess.k if stages.topk is not None and isinstance(config.postprocess, TopKPostprocessing) else None
    inputs, outputs = advertised(graph_inputs, graph_outputs, fixed_rows, stages.image_input, stages.scores_output, top_k)
    return Interface(stages, inputs, outputs)
