"""Build every variant, judge it against its budget, time it, choose one, write it all.

The order is deliberate: variants are built and judged first, so a budget nobody meets
fails in seconds, before any timing and before anything is written; the variant
folders are then written into a staging folder that replaces the output folder in one
rename, and the report comes last.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from export.convert import DEFAULT_OPSET
from export.evaluate import OutputQuality, Quality, compare, output_quality, predict_outputs, rows_of, scores_classes
from export.measure import (
    CPU_PROVIDER,
    LATENCY_BATCH,
    THROUGHPUT_BATCH,
    Feeds,
    SizeStats,
    SpeedStats,
    gpu_runner,
    measure_speed,
    onnx_runner,
    onnx_size,
)
from export.quantize import CalibrationMethod, Target
from export.selection import (
    Budget,
    Candidate,
    NoGpuMeasurement,
    NoVariantWithinBudget,
    OptimizeFor,
    Precision,
    Verdict,
    choose,
    choose_for_gpu,
    gpu_figures,
    judge,
)
from export.model_source import Source
from slipway.artifact import VARIANT_FILE

EXAMPLE_ROWS = 32
DEFAULT_FINE_TUNE_RATE = 5e-4  # the demo's: half the 1e-3 it is trained with (a user's model: half its own compiled rate)
GPU_REPORT = "gpu"  # reports/gpu.json: `make bench-gpu`'s measurement of every precision on a GPU


class Variant(str, Enum):
    fp32 = "fp32"
    int8 = "int8"
    fp16 = "fp16"
    pruned = "pruned"
    pruned_int8 = "pruned-int8"
    slim = "slim"
    slim_int8 = "slim-int8"


PRECISION: dict[Variant, Precision] = {
    Variant.fp32: "fp32",
    Variant.int8: "int8",
    Variant.fp16: "fp16",
    Variant.pruned: "fp32",
    Variant.pruned_int8: "int8",
    Variant.slim: "fp32",
    Variant.slim_int8: "int8",
}
# What each variant is made from; building one builds its parent first.
PARENT: dict[Variant, Variant | None] = {
    Variant.fp32: None,
    Variant.int8: Variant.fp32,
    Variant.fp16: Variant.fp32,
    Variant.pruned: None,
    Variant.pruned_int8: Variant.pruned,
    Variant.slim: None,
    Variant.slim_int8: Variant.slim,
}
NEEDS_TRAINING = (Variant.pruned, Variant.slim)
FLOAT_ONLY = [Variant.fp32, Variant.int8, Variant.fp16]


class ExportConfig(BaseModel):
    """Every choice an export run makes, validated once where the command line is read."""

    variants: list[Variant] = Field(default_factory=lambda: list(Variant), min_length=1)
    target: Target = Target.cpu
    calibration_method: CalibrationMethod = CalibrationMethod.minmax
    calibration_rows: int = Field(default=256, ge=1)
    sparsity: float = Field(default=0.75, gt=0, lt=1)
    slim_fraction: float = Field(default=0.5, gt=0, lt=1)
    fine_tune_epochs: int = Field(default=12, ge=1)
    fine_tune_learning_rate: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Adam's step size while pruned and "
        "slim re-learn (None: half the rate the user's model was compiled with, "
        "else 5e-4)",
    )
    budget: Budget = Field(default_factory=Budget)
    optimize_for: OptimizeFor = "latency"
    measure_rounds: int = Field(default=5, ge=1)
    measure_seconds: float = Field(default=0.3, gt=0)
    opset: int = Field(default=DEFAULT_OPSET, ge=DEFAULT_OPSET)
    gpu_report: Path | None = Field(
        default=None,
        description="target gpu without a GPU here: the `make bench-gpu` "
        "report that ranks the precisions (None: reports/gpu.json)",
    )


@dataclass
class Built:
    """One variant in memory, with the outputs of the model it was converted from."""

    variant: Variant
    model_bytes: bytes
    conversion_reference: np.ndarray
    details: dict = field(default_factory=dict)
    conversion_references: dict[str, np.ndarray] | None = None  # every output of that model, by name (None: the first)
    keras_model: Any = None  # pruned and slim: the fine-tuned Keras model the variant was converted from
    split_core: bytes | None = None  # --split: the variant's graph between the stages (export.split_variants)


@dataclass
class Judged:
    built: Built
    quality: Quality
    verdict: Verdict
    size: SizeStats
    outputs: tuple[OutputQuality, ...] = ()  # each output judged, where the budget names outputs


class ExportPlanError(ValueError):
    """The variants asked for cannot be made from this source."""


def check_output_budgets(source: Source, budget: Budget) -> None:
    """Refuse, before any variant is built, an output budget this source cannot be judged by."""
    if not budget.outputs:
        return
    if source.references is None or source.io_names is None:
        raise ExportPlanError(
            f"--output-budget and --output-tolerance judge a Keras model's named outputs; {source.name} is judged on its "
            "first output only: use --accuracy-budget"
        )
    names = source.io_names[1]
    unknown = sorted(set(budget.outputs) - set(names))
    if unknown:
        raise ExportPlanError(
            f"{source.name} has no output {', '.join(map(repr, unknown))}: its outputs are {', '.join(map(repr, names))}"
        )
    for name, limits in budget.outputs.items():
        reference = source.references[name]
        if limits.points is not None and not (scores_classes(reference) or reference.dtype.kind in "biu"):
            raise ExportPlanError(
                f"output {name!r} ({reference.dtype} {list(reference.shape[1:])} a row) scores no classes, so it has no "
                f"top-1 answer to agree on: give it --output-tolerance {name}=DIFF instead of --output-budget"
            )


def plan(source: Source, requested: list[Variant]) -> list[Variant]:
    """The variants to build, parents first; refuses what this source cannot make."""
    if source.training is None:
        impossible = [v.value for v in requested if v in NEEDS_TRAINING or PARENT[v] in NEEDS_TRAINING]
        if impossible:
            raise ExportPlanError(
                f"{', '.join(impossible)} need(s) a Keras model with training data to fine-tune (--train TRAIN.npz); "
                f"{source.name} can make {', '.join(v.value for v in FLOAT_ONLY)}"
            )
    order: list[Variant] = []
    for variant in Variant:  # enum order puts parents before children
        if variant in requested or any(PARENT[r] is variant for r in requested):
            order.append(variant)
    return order


def build(source: Source, variant: Variant, parents: dict[Variant, Built], config: ExportConfig) -> Built:
    """Make one variant from the source (or its parent, already built); with --split, its graph between the stages too."""
    built = _build_whole(source, variant, parents, config)
    if source.split is not None:
        built.split_core = _build_split_core(source, variant, parents, config, built)
    return built


def _build_split_core(
    source: Source, variant: Variant, parents: dict[Variant, Built], config: ExportConfig, built: Built
) -> bytes:
    """The variant's graph between the stages, made the way the whole variant is (export.split_variants)."""
    import onnx

    from export.float16 import to_float16
    from export.optimize import optimize_graph
    from export.quantize import quantize_int8
    from export.split_variants import fine_tuned_core

    split = source.split
    if variant is Variant.fp32:
        return optimize_graph(onnx.ModelProto.FromString(split.core)).SerializeToString()
    if variant in NEEDS_TRAINING:
        return optimize_graph(fine_tuned_core(split, built.keras_model, config.opset)).SerializeToString()
    parent = _built_parent(variant, parents).split_core
    assert parent is not None, "a parent is built before its children, its split core with it"
    if PRECISION[variant] == "int8":
        quantized = quantize_int8(
            onnx.ModelProto.FromString(parent),
            split.core_calibration,
            target=config.target,
            method=config.calibration_method,
            fixed_batch=source.fixed_batch,
        )
        return quantized.SerializeToString()
    return to_float16(onnx.ModelProto.FromString(parent)).SerializeToString()


def _built_parent(variant: Variant, parents: dict[Variant, Built]) -> Built:
    """The variant's parent, built already: the pipeline builds each parent before its children."""
    parent = PARENT[variant]
    assert parent is not None and parent in parents, f"{variant.value} is made from its parent, built before it"
    return parents[parent]


def _build_whole(source: Source, variant: Variant, parents: dict[Variant, Built], config: ExportConfig) -> Built:
    """Make one variant's whole graph from the source (or its parent, already built)."""
    import onnx

    from export.convert import keras_to_onnx
    from export.float16 import to_float16
    from export.measure import keras_runner
    from export.optimize import optimize_graph
    from export.quantize import quantize_int8

    if variant is Variant.fp32:
        return Built(
            variant,
            optimize_graph(source.onnx_model).SerializeToString(),
            source.reference,
            conversion_references=source.references,
        )
    if PRECISION[variant] == "int8":
        parent = _built_parent(variant, parents)
        quantized = quantize_int8(
            onnx.ModelProto.FromString(parent.model_bytes),
            source.calibration,
            target=config.target,
            method=config.calibration_method,
            fixed_batch=source.fixed_batch,
        )
        details = {
            "target": config.target.value,
            "calibration_method": config.calibration_method.value,
            "activations": "int8 symmetric" if config.target.symmetric_int8 else "uint8",
            "weights": "int8 per-channel symmetric",
            **parent.details,
        }
        return Built(variant, quantized.SerializeToString(), parent.conversion_reference, details, parent.conversion_references)
    if variant is Variant.fp16:
        parent = _built_parent(variant, parents)
        return Built(
            variant,
            to_float16(onnx.ModelProto.FromString(parent.model_bytes)).SerializeToString(),
            parent.conversion_reference,
            conversion_references=parent.conversion_references,
        )

    from export.keras_copy import copy_model
    from export.prune import FineTune, fine_tune, nonzero_parameters, prune_filters, prune_magnitude

    training = source.training
    assert training is not None, "variants that need training are refused for a source without training rows"
    rate = config.fine_tune_learning_rate or training.learning_rate or DEFAULT_FINE_TUNE_RATE
    settings = FineTune(epochs=config.fine_tune_epochs, learning_rate=rate, loss=training.loss)
    train, val, steps = training.datasets(settings.batch_size, seed=settings.seed)
    if variant is Variant.pruned:
        keras_model = prune_magnitude(
            copy_model(source.keras_model), train, val, sparsity=config.sparsity, fine_tune=settings, steps_per_epoch=steps
        )
        details = {"sparsity": config.sparsity, "schedule": "polynomial (power 3)", "fine_tune_epochs": settings.epochs}
    else:
        keras_model = fine_tune(prune_filters(source.keras_model, config.slim_fraction), train, val, settings)
        details = {
            "filters_removed": config.slim_fraction,
            "criterion": "L1 norm",
            "fine_tune_epochs": settings.epochs,
            "fine_tune_learning_rate": rate,
            "learning_rate_schedule": "a tenth for the last quarter of the epochs",
            "best_epoch_kept": training.val_inputs is not None,
            "keras_parameters": int(keras_model.count_params()),
        }
    details["keras_nonzero_parameters"] = nonzero_parameters(keras_model)
    if training.note:
        details["fine_tuned_on"] = training.note
    input_names, output_names = source.io_names or (None, None)
    answers = predict_outputs(keras_runner(keras_model, input_names or list(source.evaluation)), source.evaluation)
    onnx_model = keras_to_onnx(
        keras_model,
        opset=config.opset,
        input_names=input_names,
        output_names=output_names,
        input_dtypes=[rows.dtype for rows in source.evaluation.values()],  # as the source's graph takes them
    )
    model_bytes = optimize_graph(onnx_model).SerializeToString()
    references = dict(zip(output_names, answers)) if output_names else None
    return Built(variant, model_bytes, answers[0], details, references, keras_model=keras_model)


def evaluate(source: Source, built: Built, budget: Budget) -> Judged:
    """The variant on the held-out rows against the source model: its first output always, each output by name
    where the budget names outputs."""
    import onnx

    answers = predict_outputs(onnx_runner(built.model_bytes), source.evaluation, fixed_batch=source.fixed_batch)
    names = [output.name for output in onnx.ModelProto.FromString(built.model_bytes).graph.output]
    by_name = dict(zip(names, answers))
    first = by_name[source.io_names[1][0]] if source.io_names and source.io_names[1][0] in by_name else answers[0]
    quality = compare(first, source.reference, source.labels, conversion_reference=built.conversion_reference)
    outputs: tuple[OutputQuality, ...] = ()
    if budget.outputs and source.references is not None and source.io_names is not None:
        made_from = built.conversion_references or source.references
        outputs = tuple(
            output_quality(name, by_name[name], source.references[name], made_from[name]) for name in source.io_names[1]
        )
    verdict = judge(quality, PRECISION[built.variant], budget, outputs)
    if built.split_core is not None:
        verdict = _judge_split(source, built, built.split_core, by_name, budget, verdict)
    return Judged(built, quality, verdict, onnx_size(built.model_bytes), outputs)


def _judge_split(
    source: Source, built: Built, split_core: bytes, whole: dict[str, np.ndarray], budget: Budget, verdict: Verdict
) -> Verdict:
    """The variant's stages chained against its whole graph on the held-out rows, output by output: recorded in its
    details, and a variant whose chain strays beyond its budget is rejected (the split would answer otherwise than
    one pod)."""
    from export.split_variants import chained, split_verdict

    answers = chained(source.split, split_core, source.evaluation)
    names = source.io_names[1] if source.io_names else list(whole)
    against, said, broken = {}, [], None
    for name in names:
        quality = output_quality(name, answers[name], whole[name], whole[name])
        within, reason = split_verdict(quality, PRECISION[built.variant], budget)
        against[name] = quality.as_dict()
        reason = f"output {name!r} {reason}" if len(names) > 1 else reason
        said.append(reason)
        broken = broken or (None if within else reason)
    built.details["split"] = {
        "preprocess_layers": source.split.pre_layers,
        "postprocess_layers": source.split.post_layers,
        "against_whole": against,
    }
    if not verdict.accepted:
        return verdict
    if broken is not None:
        return Verdict(False, f"its --split stages chained: {broken}")
    return Verdict(True, f"{verdict.reason}; --split stages chained: {'; '.join(said)}")


def timing_feeds(source: Source) -> tuple[Feeds, Feeds]:
    """Rows for the latency batch and the throughput batch (a fixed batch dimension is used as it is)."""

    def take(rows: int) -> Feeds:
        return {name: np.resize(array, (rows, *array.shape[1:])) for name, array in source.evaluation.items()}

    if source.fixed_batch:
        return take(source.fixed_batch), take(source.fixed_batch)
    return take(LATENCY_BATCH), take(THROUGHPUT_BATCH)


def example_outputs(model_bytes: bytes, inputs: Feeds) -> dict[str, np.ndarray]:
    """Every output of the variant on the example rows, by name: what a smoke test compares against."""
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


def example_inputs(source: Source) -> Feeds:
    rows = source.fixed_batch or min(EXAMPLE_ROWS, rows_of(source.evaluation))
    return {name: np.resize(array, (rows, *array.shape[1:])) for name, array in source.evaluation.items()}


def step_count(source: Source, config: ExportConfig) -> int:
    """How many times `run_export` calls `step`: the length of its progress bar."""
    return len(plan(source, config.variants)) + len(config.variants) + 1 + config.measure_rounds + 1


@dataclass
class ExportResult:
    judged: list[Judged]
    speeds: dict[str, SpeedStats]
    baseline_size: SizeStats
    chosen: str
    reason: str
    out_dir: Path
    digests: dict[str, str]  # variant -> manifest digest: what the version store matches a published folder by
    timed_on: str = CPU_PROVIDER  # the execution provider the variants were timed on


def holds_variants(folder: Path) -> bool:
    """Is `folder` a previous export's output (only artifact folders)? Then a new export may replace it."""
    from slipway.artifact import is_artifact_folder

    return all(path.is_dir() and is_artifact_folder(path) for path in Path(folder).iterdir())


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before the export runs, an `--out` that is a file or a folder other than a previous export."""
    from slipway import atomic

    atomic.check_replaceable(Path(out_dir), owns=holds_variants)


def run_export(
    source: Source, config: ExportConfig, out_dir: Path, *, step: Callable[[str], None] = lambda _: None
) -> ExportResult:
    """Build, judge, time, choose and write: the whole export of one source."""
    from export.package import write_artifact
    from slipway import atomic

    order = plan(source, config.variants)
    check_output_budgets(source, config.budget)
    gpu_measurement = _gpu_measurement(config)  # before any work: a GPU choice with nothing to go by fails now
    built: dict[Variant, Built] = {}
    for variant in order:
        step(f"building {variant.value}")
        built[variant] = build(source, variant, built, config)
    judged = []
    for variant in config.variants:
        step(f"judging {variant.value}")
        judged.append(evaluate(source, built[variant], config.budget))
    if not any(j.verdict.accepted for j in judged):
        reasons = "; ".join(f"{j.built.variant.value}: {j.verdict.reason}" for j in judged)
        raise NoVariantWithinBudget(f"no variant of {source.name} is within budget ({reasons}); nothing was written")

    runners = {source.baseline_name: source.baseline_runner()}
    on_gpu = _gpu_runners(judged) if config.target is Target.gpu else None
    runners.update(on_gpu or {j.built.variant.value: onnx_runner(j.built.model_bytes) for j in judged})
    timed_on = GPU_TIMING_PROVIDER if on_gpu else CPU_PROVIDER
    latency_feeds, throughput_feeds = timing_feeds(source)
    step(f"timing {len(runners)} models")
    speeds = measure_speed(
        runners,
        latency_feeds,
        throughput_feeds,
        rounds=config.measure_rounds,
        seconds_per_round=config.measure_seconds,
        on_round=lambda: step("timing round"),
    )
    candidates = [
        Candidate(
            j.built.variant.value,
            j.verdict.accepted,
            speeds[j.built.variant.value].p50_latency_ms,
            speeds[j.built.variant.value].throughput,
            PRECISION[j.built.variant],
        )
        for j in judged
    ]
    chosen, reason = choose_variant(candidates, config, timed_on=timed_on, gpu_measurement=gpu_measurement)

    step("writing artifacts")
    inputs = example_inputs(source)
    labels = source.labels[: rows_of(inputs)] if source.labels is not None else None
    digests = {}
    with atomic.staged_dir(out_dir, owns=holds_variants) as staging:
        for j in judged:
            lineage = {
                "model": source.name,
                "variant": j.built.variant.value,
                "precision": PRECISION[j.built.variant],
                "source": {"kind": source.kind, "sha256": source.sha256},  # no paths: equal content, equal digest
                "derived_from": parent.value if (parent := PARENT[j.built.variant]) else "source",
                "details": j.built.details,
            }
            extra_files = {VARIANT_FILE: (json.dumps(lineage, indent=2, sort_keys=True) + "\n").encode()}
            extra_settings = None
            if j.built.split_core is not None:  # the stages, and this variant's graph between them
                from export.split_stages import stage_settings
                from export.split_variants import split_files

                extra_files.update(split_files(source.split, j.built.split_core))
                extra_settings = stage_settings()
            digests[j.built.variant.value] = write_artifact(
                staging / j.built.variant.value,
                onnx_bytes=j.built.model_bytes,
                name=source.name,
                example_inputs=inputs,
                example_outputs=example_outputs(j.built.model_bytes, inputs),
                example_labels=labels,
                extra_files=extra_files,
                extra_settings=extra_settings,
            ).digest
    return ExportResult(judged, speeds, source.baseline_size(), chosen, reason, Path(out_dir), digests, timed_on)


GPU_TIMING_PROVIDER = "CUDAExecutionProvider"


def _gpu_runners(judged: list[Judged]) -> dict[str, Callable] | None:
    """Every variant in a session on the GPU, where this onnxruntime has one that works; None otherwise."""
    runners = {}
    for j in judged:
        runner = gpu_runner(j.built.model_bytes, GPU_TIMING_PROVIDER)
        if runner is None:
            return None
        runners[j.built.variant.value] = runner
    return runners


def _gpu_measurement(config: ExportConfig) -> tuple[dict, str] | None:
    """For target gpu where no GPU can time the variants: the `make bench-gpu` report and where it was measured.

    Read before any variant is built, so that a GPU choice with nothing to go by fails in a second.
    """
    if config.target is not Target.gpu:
        return None
    import onnxruntime as ort

    from slipway.files import FileProblem, read_json
    from slipway.paths import REPORTS_DIR

    path = config.gpu_report or REPORTS_DIR / f"{GPU_REPORT}.json"
    try:
        report = read_json(path, f"GPU measurement {path}")
    except FileProblem as err:
        if GPU_TIMING_PROVIDER in ort.get_available_providers():
            return None  # the variants are timed on this machine's GPU instead (a failing one: the choice says so)
        raise NoGpuMeasurement(
            f"--target gpu chooses by a GPU's timing, and this machine has none: {err}. Run "
            "`make bench-gpu` on a GPU machine and pass its report with --gpu-report"
        ) from err
    if not isinstance(report, dict):
        raise NoGpuMeasurement(f"GPU measurement {path} is not a `make bench-gpu` report (a JSON object with rows)")
    return report, f"{report.get('gpu') or 'a GPU'}, {path}"


def choose_variant(
    candidates: list[Candidate], config: ExportConfig, *, timed_on: str, gpu_measurement: tuple[dict, str] | None
) -> tuple[str, str]:
    """The variant to ship and why: the fastest accepted one as timed here, except for target gpu timed on
    the CPU, where a GPU measurement ranks the precisions (`choose_for_gpu`): a CPU's ranking is not a GPU's
    (fp16 runs slower than fp32 on most CPUs, faster on GPUs; U8S8 int8 is the CPU's)."""
    if config.target is not Target.gpu or timed_on != CPU_PROVIDER:
        chosen, reason = choose(candidates, config.optimize_for)
        return chosen, reason + (f" (timed on {timed_on})" if timed_on != CPU_PROVIDER else "")
    if gpu_measurement is None:
        raise NoGpuMeasurement(
            "--target gpu: the variants could not be timed on this machine's GPU and there is no "
            "GPU measurement to choose by: pass `make bench-gpu`'s report with --gpu-report"
        )
    report, measured_on = gpu_measurement
    return choose_for_gpu(candidates, gpu_figures(report, config.optimize_for), config.optimize_for, measured_on)
