"""Output drift of a shadow against the stable predictor, on the same mirrored requests.

A shadow is sent a copy of every request the stable predictor serves, so where both answer alike, each class
wins the same share of rows on both. The distance between the two shares (total variation: half the sum of
the absolute differences, 0 identical, 1 disjoint) measures how much the new version's answers moved, before
it serves anyone. Counted from the runtime's `slipway_predicted_class_total`; a model that is not a classifier
exports none, and then drift is reported as not measured rather than passed or failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from deployments.delivery.canary.queries import PredictorQueries
from deployments.sizing.prometheus import Prometheus
from slipway.metric_names import CLASS_LABEL
from slipway.slo import CanaryPolicy, Slo

DriftDecision = Literal["holds", "fail", "wait", "unmeasured"]


@dataclass(frozen=True)
class DriftVerdict:
    """Shares of rows per class on both predictors, their distance and what it means."""

    decision: DriftDecision
    stable_rows: float
    shadow_rows: float
    distance: float | None
    limit: float
    window: str
    line: str

    def as_dict(self) -> dict:
        return {
            "decision": self.decision,
            "stable_rows": self.stable_rows,
            "shadow_rows": self.shadow_rows,
            "distance": self.distance,
            "limit": self.limit,
            "window": self.window,
            "line": self.line,
        }


def class_counts(prometheus: Prometheus, queries: PredictorQueries, *, at: float) -> dict[str, float]:
    return {
        labels.get(CLASS_LABEL, ""): value for labels, value in prometheus.vector(queries.predicted_classes, at=at) if value > 0
    }


def distance(first: dict[str, float], second: dict[str, float]) -> float:
    """Total variation distance between two tallies, as shares."""
    total_first, total_second = sum(first.values()), sum(second.values())
    return 0.5 * sum(
        abs(first.get(key, 0.0) / total_first - second.get(key, 0.0) / total_second) for key in set(first) | set(second)
    )


def judge_drift(
    prometheus: Prometheus,
    slo: Slo,
    *,
    namespace: str,
    deployment: str,
    stable: str,
    shadow: str,
    window: str,
    at: float | None = None,
) -> DriftVerdict:
    at = time.time() if at is None else at
    counts = {
        name: class_counts(prometheus, PredictorQueries(namespace, deployment, name, window), at=at) for name in (stable, shadow)
    }
    return decide_drift(slo.canary or CanaryPolicy(), stable=counts[stable], shadow=counts[shadow], window=window)


def decide_drift(policy: CanaryPolicy, *, stable: dict[str, float], shadow: dict[str, float], window: str) -> DriftVerdict:
    """The decision on counted rows (no I/O)."""
    rows = {"stable": sum(stable.values()), "shadow": sum(shadow.values())}

    def verdict(decision: DriftDecision, moved: float | None, line: str) -> DriftVerdict:
        return DriftVerdict(decision, rows["stable"], rows["shadow"], moved, policy.max_output_drift, window, line)

    if not stable and not shadow:
        return verdict(
            "unmeasured",
            None,
            f"output drift not measured: neither predictor exports slipway_predicted_class_total in "
            f"the last {window} (not a classifier, or no traffic)",
        )
    short = [f"{side} counted {count:.0f} rows" for side, count in rows.items() if count < policy.min_requests]
    if short:
        return verdict(
            "wait", None, f"wait: {'; '.join(short)} in the last {window}; {policy.min_requests} needed (canary.min_requests)"
        )
    moved = distance(stable, shadow)
    if moved > policy.max_output_drift:
        return verdict(
            "fail",
            moved,
            f"max_output_drift: the shadow's classes moved {moved:.3f} from the stable's on the same "
            f"requests (total variation over the last {window}); over the limit "
            f"{policy.max_output_drift:.3f}",
        )
    return verdict(
        "holds", moved, f"output drift {moved:.3f} within {policy.max_output_drift:.3f} over {rows['shadow']:.0f} mirrored rows"
    )
