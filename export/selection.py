"""The budget a variant must meet to be shipped, and the choice of the one to publish.

Accuracy is what users care about, so the main budget is the accuracy drop against the
reference model, in percentage points. Without labels accuracy is unknown, and the same
budget applies to the share of rows whose top-1 answer changed (a stricter proxy).
Float variants must also reproduce the model they were converted from, within a
tolerance scaled to the output's magnitude: a conversion bug shows there first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from export.evaluate import Quality

OptimizeFor = Literal["latency", "throughput"]
ROUNDING = 1e-9  # (1 - 0.99) * 100 is 1.0000000000000009: a drop of exactly the budget is within it
Precision = Literal["fp32", "fp16", "int8"]


class Budget(BaseModel):
    """Limits a variant must stay within; validated once where the command line is read."""

    accuracy_points: float = Field(default=0.5, ge=0, description="largest accuracy drop, in percentage points")
    fp32_tolerance: float = Field(default=1e-4, ge=0, description="max abs diff of an fp32 variant, per unit of output scale")
    fp16_tolerance: float = Field(default=1e-2, ge=0, description="max abs diff of an fp16 variant, per unit of output scale")


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


class NoVariantWithinBudget(Exception):
    """Every variant broke its budget; the message lists why."""


def judge(quality: Quality, precision: Precision, budget: Budget) -> Verdict:
    """Accept or reject one variant, saying which limit it broke or which it met."""
    if quality.accuracy_drop_points is not None:
        basis, lost = "accuracy drop", quality.accuracy_drop_points
    else:
        basis, lost = "top-1 disagreement (accuracy unknown: no labels)", quality.disagreement_points
    if lost > budget.accuracy_points + ROUNDING:
        return Verdict(False, f"{basis} {lost:.2f} points > budget {budget.accuracy_points:g}")
    tolerance = {"fp32": budget.fp32_tolerance, "fp16": budget.fp16_tolerance}.get(precision)
    if tolerance is not None and quality.max_abs_diff is not None:
        limit = tolerance * max(1.0, quality.reference_scale)
        if quality.max_abs_diff > limit:
            return Verdict(False, f"max abs diff {quality.max_abs_diff:.2e} > {precision} tolerance {limit:.1e}")
    return Verdict(True, f"{basis} {lost:.2f} points <= budget {budget.accuracy_points:g}")


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
