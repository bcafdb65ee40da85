"""The budget a variant must meet to be shipped, and the choice of the one to publish.

Accuracy is what users care about, so the main budget is the accuracy drop against the
reference model, in percentage points. Without labels accuracy is unknown, and the same
budget applies to the share of rows whose top-1 answer changed (a stricter proxy).
Float variants must also reproduce the model they were converted from, within a
tolerance scaled to the output's magnitude (export.tolerance, the rule `export convert`
checks its parity by): a conversion bug shows there first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from export.evaluate import OutputQuality, Quality
from export.tolerance import FP16_TOLERANCE, FP32_TOLERANCE, allowed

OptimizeFor = Literal["latency", "throughput"]
ROUNDING = 1e-9  # (1 - 0.99) * 100 is 1.0000000000000009: a drop of exactly the budget is within it
Precision = Literal["fp32", "fp16", "int8"]


class OutputLimit(BaseModel):
    """The budget of one named output, for every variant (int8 included)."""

    points: float | None = Field(default=None, ge=0, description="largest top-1 disagreement with the source model, in points")
    tolerance: float | None = Field(default=None, ge=0, description="max abs diff per unit of the output's scale")


class Budget(BaseModel):
    """Limits a variant must stay within; validated once where the command line is read."""

    accuracy_points: float = Field(default=0.5, ge=0, description="largest accuracy drop, in percentage points")
    fp32_tolerance: float = Field(
        default=FP32_TOLERANCE, ge=0, description="max abs diff of an fp32 variant, per unit of output scale (export.tolerance)"
    )
    fp16_tolerance: float = Field(
        default=FP16_TOLERANCE, ge=0, description="max abs diff of an fp16 variant, per unit of output scale (export.tolerance)"
    )
    outputs: dict[str, OutputLimit] = Field(
        default_factory=dict,
        description="per named output (--output-budget, --output-tolerance); an output's own points "
        "replace accuracy_points on the first output",
    )


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    reason: str


@dataclass(frozen=True)
class Candidate:
    name: str
    accepted: bool
    p50_latency_ms: float
    throughput: float
    precision: Precision | None = None


@dataclass(frozen=True)
class GpuFigure:
    """The best a precision did on a GPU provider in a `make bench-gpu` report (benchmarks.gpu)."""

    value: float  # p50 ms at the smallest batch (latency), rows/s at the largest (throughput)
    provider: str
    batch: int


class NoGpuMeasurement(Exception):
    """The GPU measurement cannot rank the variants; the message says what to measure."""


class NoVariantWithinBudget(Exception):
    """Every variant broke its budget; the message lists why."""


def judge(quality: Quality, precision: Precision, budget: Budget, outputs: tuple[OutputQuality, ...] = ()) -> Verdict:
    """Accept or reject one variant, saying which limit it broke or which it met.

    `outputs` (every output, the first first) are judged by their own limits in `budget.outputs`; the first
    output's own points, where given, replace the model-wide accuracy budget."""
    own = budget.outputs.get(outputs[0].name) if outputs else None
    met = []
    if own is None or own.points is None:
        if quality.accuracy_drop_points is not None:
            basis, lost = "accuracy drop", quality.accuracy_drop_points
        else:
            basis, lost = "top-1 disagreement (accuracy unknown: no labels)", quality.disagreement_points
        if lost > budget.accuracy_points + ROUNDING:
            return Verdict(False, f"{basis} {lost:.2f} points > budget {budget.accuracy_points:g}")
        met.append(f"{basis} {lost:.2f} points <= budget {budget.accuracy_points:g}")
    tolerance = {"fp32": budget.fp32_tolerance, "fp16": budget.fp16_tolerance}.get(precision)
    if tolerance is not None and quality.max_abs_diff is not None:
        limit = allowed(tolerance, quality.reference_scale)
        if quality.max_abs_diff > limit:
            return Verdict(False, f"max abs diff {quality.max_abs_diff:.2e} > {precision} tolerance {limit:.1e}")
    for output in outputs:
        limits = budget.outputs.get(output.name)
        if limits is None:
            continue
        if limits.points is not None and output.disagreement_points is not None:
            if output.disagreement_points > limits.points + ROUNDING:
                return Verdict(
                    False,
                    f"output {output.name!r}: top-1 disagreement {output.disagreement_points:.2f} points > its budget "
                    f"{limits.points:g}",
                )
            met.append(f"output {output.name!r} {output.disagreement_points:.2f} points <= {limits.points:g}")
        if limits.tolerance is not None:
            limit = allowed(limits.tolerance, output.scale)
            if output.max_abs_diff > limit:
                return Verdict(
                    False, f"output {output.name!r}: max abs diff {output.max_abs_diff:.2e} > its tolerance {limit:.1e}"
                )
            met.append(f"output {output.name!r} max abs diff {output.max_abs_diff:.1e} <= {limit:.1e}")
    return Verdict(True, "; ".join(met) or "within every output's budget")


def choose(candidates: list[Candidate], optimize_for: OptimizeFor) -> tuple[str, str]:
    """The fastest accepted variant, and a sentence saying why it won."""
    accepted = [c for c in candidates if c.accepted]
    if not accepted:
        raise NoVariantWithinBudget("no variant is within budget")
    if optimize_for == "latency":
        best = min(accepted, key=lambda c: (c.p50_latency_ms, c.name))
        measure = f"lowest p50 latency ({best.p50_latency_ms:.3f} ms)"
    else:
        best = max(accepted, key=lambda c: (c.throughput, c.name))
        measure = f"highest throughput ({best.throughput:,.0f} rows/s)"
    rejected = [c.name for c in candidates if not c.accepted]
    reason = f"{best.name}: {measure} of the {len(accepted)} variant(s) within budget"
    if rejected:
        reason += f"; rejected: {', '.join(rejected)}"
    return best.name, reason


def gpu_figures(report: dict, optimize_for: OptimizeFor) -> dict[str, GpuFigure]:
    """Per precision, its best measured row on a GPU provider (CUDA, CUDA graphs, TensorRT) of a `make bench-gpu`
    report: lowest p50 at the smallest batch measured for latency, highest rows/s at the largest for throughput."""
    rows = [
        row
        for row in report.get("rows", [])
        if isinstance(row, dict)
        and row.get("status") == "measured"
        and row.get("provider") not in (None, "CPUExecutionProvider")
        and row.get("precision")
        and isinstance(row.get("batch"), int)
    ]
    if not rows:
        return {}
    batch = (min if optimize_for == "latency" else max)(row["batch"] for row in rows)
    figures: dict[str, GpuFigure] = {}
    for row in rows:
        if row["batch"] != batch:
            continue
        value = row.get("p50_ms") if optimize_for == "latency" else row.get("rows_per_s")
        if not isinstance(value, int | float):
            continue
        provider = row["provider"] + (" + CUDA graph" if row.get("cuda_graph") else "")
        best = figures.get(row["precision"])
        if best is None or (value < best.value if optimize_for == "latency" else value > best.value):
            figures[row["precision"]] = GpuFigure(float(value), provider, batch)
    return figures


def choose_for_gpu(
    candidates: list[Candidate], figures: dict[str, GpuFigure], optimize_for: OptimizeFor, measured_on: str
) -> tuple[str, str]:
    """The accepted variant of the precision the GPU measurement ranks first, and a sentence saying why.

    The precision comes from `figures` (measured on a GPU, `measured_on` says where); among variants of that
    precision (fp32, pruned and slim are all fp32) the one this run timed fastest wins: same numbers, less work.
    """
    accepted = [c for c in candidates if c.accepted]
    if not accepted:
        raise NoVariantWithinBudget("no variant is within budget")
    ranked = [c for c in accepted if c.precision is not None and c.precision in figures]
    if not ranked:
        have = ", ".join(sorted(figures)) or "no precision"
        raise NoGpuMeasurement(
            f"{measured_on} measured {have} on a GPU, none of the accepted variants' precisions "
            f"({', '.join(sorted({str(c.precision) for c in accepted}))}): run `make bench-gpu` on the GPU machine"
        )
    latency = optimize_for == "latency"
    figure = (min if latency else max)((figures[c.precision] for c in ranked if c.precision is not None), key=lambda f: f.value)
    precision = next(p for p, f in figures.items() if f is figure)
    same = [c for c in ranked if c.precision == precision]
    best = min(same, key=lambda c: (c.p50_latency_ms, c.name)) if latency else max(same, key=lambda c: (c.throughput, c.name))
    measure = (
        f"lowest GPU p50 latency ({figure.value:.3f} ms at batch {figure.batch}"
        if latency
        else f"highest GPU throughput ({figure.value:,.0f} rows/s at batch {figure.batch}"
    )
    others = sorted({str(c.precision) for c in ranked} - {precision})
    reason = f"{best.name}: {precision} has the {measure}, {figure.provider}, {measured_on})" + (
        f" of the accepted precisions ({', '.join([precision, *others])})" if others else ""
    )
    if len(same) > 1:
        reason += f"; fastest {precision} variant in this run's timing"
    rejected = [c.name for c in candidates if not c.accepted]
    if rejected:
        reason += f"; rejected: {', '.join(rejected)}"
    return best.name, reason
