"""Output drift of a shadow against the stable predictor: the rule on counted rows, and the same read from a real
Prometheus serving recorded class counters (series.py)."""

from __future__ import annotations

import pytest

from deployments.delivery.canary.drift import decide_drift, distance, judge_drift
from deployments.sizing.prometheus import Prometheus
from slipway.slo import CanaryPolicy, Slo
from tests.deployments.canary.series import DEPLOYMENT, SHADOW, STABLE


def test_distance_is_total_variation_of_the_shares():
    assert distance({"0": 50, "1": 50}, {"0": 5, "1": 5}) == 0  # the same shares whatever the volume
    assert distance({"0": 10}, {"1": 10}) == 1  # disjoint
    assert distance({"0": 60, "1": 40}, {"0": 40, "1": 60}) == pytest.approx(0.2)
    assert distance({"0": 1, "1": 1}, {"0": 1, "1": 1, "2": 2}) == pytest.approx(0.5)  # a class only one side picks


@pytest.mark.parametrize(
    ("stable", "shadow", "decision"),
    [
        ({"0": 500, "1": 500}, {"0": 510, "1": 490}, "holds"),
        ({"0": 500, "1": 500}, {"0": 700, "1": 300}, "fail"),
        ({"0": 500, "1": 500}, {"0": 60, "1": 40}, "wait"),  # 100 mirrored rows: too few to say
        ({}, {}, "unmeasured"),
    ],
)
def test_the_drift_rule(stable, shadow, decision):
    verdict = decide_drift(CanaryPolicy(min_requests=200, max_output_drift=0.05), stable=stable, shadow=shadow, window="5m")
    assert verdict.decision == decision
    if decision == "fail":
        assert verdict.line.startswith("max_output_drift: the shadow's classes moved 0.200") and "0.050" in verdict.line
    if decision == "wait":
        assert "shadow counted 100 rows" in verdict.line and "200 needed" in verdict.line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("namespace", "decision", "moved"),
    [
        ("shadow-faithful", "holds", (0.0, 0.01)),
        ("shadow-drifting", "fail", (0.29, 0.31)),
        ("shadow-regressor", "unmeasured", None),
    ],
)
def test_drift_from_recorded_class_counters(prometheus_url, recorded, namespace, decision, moved):
    verdict = judge_drift(
        Prometheus(prometheus_url),
        Slo(),
        namespace=namespace,
        deployment=DEPLOYMENT,
        stable=STABLE,
        shadow=SHADOW,
        window="5m",
        at=recorded.end,
    )
    assert verdict.decision == decision, verdict.line
    if moved:
        assert moved[0] <= verdict.distance <= moved[1]
        assert 5900 <= verdict.stable_rows <= 6100 and 5900 <= verdict.shadow_rows <= 6100
