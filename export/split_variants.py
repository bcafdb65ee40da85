"""`export variants --split`: every variant keeps the model's own preprocessing and softmax as graphs of their own.

`export convert --split` cuts a Keras model into a preprocessing graph, the model between, and a softmax/argmax
graph (`export.split_stages`). With `--split`, `export variants` cuts the same way once, then makes each variant of
the graph between the stages too, the way the whole variant is made: fp32 optimized, int8 quantized on the
calibration rows as the preprocessing graph hands them on, fp16 converted, and pruned and slim cut again from
their fine-tuned Keras model (whose stages must be the same layers). The stage graphs themselves are the
same in every variant. A variant ships only when its three graphs chained answer as the whole variant does,
within the variant's own budget (top-1 and its precision's tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from export.evaluate import OutputQuality
from export.keras_copy import copy_model
from export.keras_io import read_interface
from export.keras_load import LoadedModel
from export.measure import Feeds
from export.selection import ROUNDING, Budget, Precision
from export.split_stages import (
    POST_FILE,
    PRE_FILE,
    SPLIT_MODEL_FILE,
    SplitError,
    chain,
    convert_stages,
    cut_stages,
)
from export.tolerance import allowed, worst_beyond

WITHOUT_SPLIT = "make its variants without --split"


@dataclass
class SplitSource:
    """The stages cut from the source model, its fp32 graph between them, and the rows that graph is fed."""

    pre: bytes
    core: bytes  # the fp32 graph between the stages, as converted (each variant is made from it)
    post: bytes
    pre_layers: list[str]
    post_layers: list[str]
    core_calibration: Feeds  # the calibration rows through the preprocessing graph: what int8's core is calibrated on
    loaded: LoadedModel  # the source model as loaded: its path, format and names, for cutting fine-tuned copies


def split_source(model: LoadedModel, evaluation: Feeds, calibration: Feeds, opset: int, tolerance: float) -> SplitSource:
    """Cut `model` (`cut_stages`), convert and check each stage and the three chained against the whole model on
    the held-out rows; refused in one line (SplitError) where it cannot be cut or strays beyond `tolerance`."""
    instead = f"{WITHOUT_SPLIT}, or raise --fp32-tolerance"
    stages = cut_stages(_copy(model, model.keras_model), WITHOUT_SPLIT)
    graphs = convert_stages(stages, evaluation, opset, tolerance, instead)
    beyond = worst_beyond(model.predict(evaluation), graphs.chained, tolerance)
    if beyond is not None:
        output, row, diff, limit = beyond
        raise SplitError(
            f"the --split stages chained answer beyond the tolerance, worst at output {output!r}, row {row}: abs diff "
            f"{diff:.2e} (allowed {limit:.1e}); nothing was written: {instead}"
        )
    return SplitSource(
        graphs.pre,
        graphs.core,
        graphs.post,
        stages.pre_layers,
        stages.post_layers,
        chain([graphs.pre], calibration),  # the inputs it does not take pass, as the transformer passes them
        model,
    )


def fine_tuned_core(split: SplitSource, keras_model, opset: int):
    """The graph between the stages of a fine-tuned copy of the source model (pruned, slim), as ONNX; refused when
    its stages are not the source's (the stage graphs every variant shares would not fit it)."""
    loaded = split.loaded
    stages = cut_stages(_copy(loaded, keras_model), WITHOUT_SPLIT)
    if (stages.pre_layers, stages.post_layers) != (split.pre_layers, split.post_layers):
        raise SplitError(
            f"the fine-tuned copy of {loaded.path} cuts into stages {stages.pre_layers} and {stages.post_layers}, the "
            f"model into {split.pre_layers} and {split.post_layers}: {WITHOUT_SPLIT}, or leave out pruned and slim"
        )
    return stages.core.to_onnx(opset)


def _copy(loaded: LoadedModel, keras_model) -> LoadedModel:
    """A copy of `keras_model` with its weights, loaded as `loaded` was: cutting calls the layers anew, which
    would leave the model the variants are made from with layers used twice (filter pruning refuses those)."""
    if keras_model is None:
        return loaded  # a SavedModel: cut_stages refuses it, naming it
    copy = copy_model(keras_model)
    interface = read_interface(copy)
    return LoadedModel(loaded.path, loaded.format, interface.inputs, interface.output_names, copy, interface=interface)


def chained(split: SplitSource, core: bytes, feeds: Feeds) -> dict[str, np.ndarray]:
    """The preprocessing graph, `core` and the softmax/argmax graph chained on `feeds`: what the split serves."""
    return chain([split.pre, core, split.post], feeds)


def split_files(split: SplitSource, core: bytes) -> dict[str, bytes]:
    """The stage graphs and the variant's graph between them, by file name, written beside its model.onnx."""
    return {PRE_FILE: split.pre, SPLIT_MODEL_FILE: core, POST_FILE: split.post}


def split_verdict(answers: OutputQuality, precision: Precision, budget: Budget) -> tuple[bool, str]:
    """Do the chained graphs answer as the whole variant does (`answers`: the chain against the whole variant, one
    output), within the variant's budget: its top-1 answers (or integer values) within the output's own points or
    the accuracy budget; its values within the output's own `--output-tolerance` and, for fp32 and fp16, within
    their tolerance?"""
    own = budget.outputs.get(answers.name)
    points = own.points if own is not None and own.points is not None else budget.accuracy_points
    said = []
    if answers.disagreement_points is not None:
        if answers.disagreement_points > points + ROUNDING:
            return False, (
                f"top-1 disagreement with the whole variant {answers.disagreement_points:.2f} points > budget {points:g}"
            )
        said.append(f"top-1 disagreement with the whole variant {answers.disagreement_points:.2f} points")
    tolerances = {"fp32": budget.fp32_tolerance, "fp16": budget.fp16_tolerance}
    limits = [(f"{precision} tolerance", tolerances[precision])] if precision in tolerances else []
    if own is not None and own.tolerance is not None:
        limits.append(("its tolerance", own.tolerance))
    for what, tolerance in limits:
        limit = allowed(tolerance, answers.scale)
        if answers.max_abs_diff > limit:
            return False, f"max abs diff from the whole variant {answers.max_abs_diff:.2e} > {what} {limit:.1e}"
    said.append(f"max abs diff from the whole variant {answers.max_abs_diff:.1e}")
    return True, ", ".join(said)
