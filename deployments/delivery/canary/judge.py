"""Judge a canary predictor against its stable one and the SLO, from the pods' own Prometheus series.

One decision per call, over a trailing window ending at `at`:
- `wait` when either predictor served fewer requests than the SLO file's `canary.min_requests` (or has no
  latency observations while the SLO limits latency): too little to judge, say how many and how many needed;
- `fail` when the canary breaks a limit of the SLO file (p50_ms, p95_ms, p99_ms, max_error_rate), or is worse
  than the stable predictor by more than the `canary:` tolerances; every such line is named with the canary's
  figure, the stable's and the limit it broke;
- `promote-step` otherwise: the canary holds, its weight may go up one step.
`min_rps` is not judged: the canary's traffic is whatever share the controller gives it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from deployments.delivery.canary.queries import DEFAULT_LATENCY_HISTOGRAM, QUANTILES, RUN_HISTOGRAM, PredictorQueries
from deployments.sizing.prometheus import Prometheus
from slipway.slo import CanaryPolicy, Slo

Decision = Literal["promote-step", "wait", "fail"]
DEFAULT_WINDOW = "5m"


@dataclass(frozen=True)
class Figures:
    """One predictor over the window: requests served and failed, error rate, latency quantiles in ms (of the judged
    histogram), and beside them the ONNX Runtime run's quantiles (`run_latency_ms`, not judged; empty where the run's
    histogram is the judged one)."""

    predictor: str
    requests: float
    failures: float
    latency_observations: float
    latency_ms: dict[str, float | None]
    run_latency_ms: dict[str, float | None] = field(default_factory=dict)

    @property
    def error_rate(self) -> float | None:
        return self.failures / self.requests if self.requests > 0 else None

    def as_dict(self) -> dict:
        return {**asdict(self), "error_rate": self.error_rate}


@dataclass(frozen=True)
class Failure:
    """One SLO line the canary broke: against the SLO's own limit ("slo") or against the stable predictor
    plus the tolerance ("stable")."""

    line: str  # the SLO file's key: p95_ms, max_error_rate, ...
    against: Literal["slo", "stable"]
    canary: float
    stable: float | None
    limit: float
    # a latency line's quantile of ONNX Runtime's run alone (canary, stable), where the judged histogram is another:
    # alike on both sides, the canary is slower around the model's run (decoding, queueing, processing), not in it
    run: tuple[float | None, float | None] | None = None

    def message(self) -> str:
        if self.line == "max_error_rate":
            values = f"canary error rate {self.canary:.2%} vs stable {_rate(self.stable)}"
            limit = f"{self.limit:.2%}"
        else:
            name = self.line.removesuffix("_ms")
            values = f"canary {name} {self.canary:.2f} ms vs stable {_ms(self.stable)}"
            limit = f"{self.limit:.2f} ms"
        beside = (
            "" if self.run is None else f" (ONNX Runtime's run alone: canary {_ms(self.run[0])} vs stable {_ms(self.run[1])})"
        )
        if self.against == "slo":
            return f"{self.line}: {values}; over the SLO limit {limit}{beside}"
        return f"{self.line}: {values}; over the stable's plus tolerance, {limit}{beside}"

    def as_dict(self) -> dict:
        return {**asdict(self), "message": self.message()}


@dataclass(frozen=True)
class Verdict:
    """The judge's decision with the figures it was made on; `lines()` says why in words."""

    decision: Decision
    canary: Figures
    stable: Figures
    window: str
    at: float
    failures: list[Failure] = field(default_factory=list)
    waiting_for: str | None = None  # with `wait`: what is missing

    def lines(self) -> list[str]:
        if self.decision == "fail":
            return [failure.message() for failure in self.failures]
        if self.decision == "wait":
            return [f"wait: {self.waiting_for}"]
        return [
            (
                f"canary {self.canary.predictor} holds the SLO and stays within the stable's tolerances "
                f"over {self.window} ({self.canary.requests:.0f} requests vs {self.stable.requests:.0f})"
            )
        ]

    def as_dict(self) -> dict:
        return {
            "decision": self.decision,
            "window": self.window,
            "at": self.at,
            "lines": self.lines(),
            "canary": self.canary.as_dict(),
            "stable": self.stable.as_dict(),
            "failures": [failure.as_dict() for failure in self.failures],
            "waiting_for": self.waiting_for,
        }


def measure(prometheus: Prometheus, queries: PredictorQueries, *, at: float) -> Figures:
    """One predictor's figures at `at` (a counter with no series counts as zero)."""
    successes = prometheus.scalar(queries.successes, at=at) or 0.0
    failures = prometheus.scalar(queries.failures, at=at) or 0.0
    observations = prometheus.scalar(queries.latency_observations, at=at) or 0.0
    latency = {}
    for line, quantile in QUANTILES.items():
        seconds = prometheus.scalar(queries.latency(quantile), at=at)
        latency[line] = None if seconds is None or observations <= 0 else seconds * 1000.0
    run_latency: dict[str, float | None] = {}
    if queries.latency_histogram != RUN_HISTOGRAM:
        for line, quantile in QUANTILES.items():
            seconds = prometheus.scalar(queries.latency(quantile, RUN_HISTOGRAM), at=at)
            run_latency[line] = None if seconds is None else seconds * 1000.0
    return Figures(queries.predictor, successes + failures, failures, observations, latency, run_latency)


def judge(
    prometheus: Prometheus,
    slo: Slo,
    *,
    namespace: str,
    deployment: str,
    stable: str,
    canary: str,
    window: str = DEFAULT_WINDOW,
    at: float | None = None,
    latency_histogram: str = DEFAULT_LATENCY_HISTOGRAM,
) -> Verdict:
    """Measure both predictors of `deployment` over `window` ending at `at` (default now) and decide."""
    at = time.time() if at is None else at
    figures = {
        name: measure(prometheus, PredictorQueries(namespace, deployment, name, window, latency_histogram), at=at)
        for name in (stable, canary)
    }
    return decide(slo, stable=figures[stable], canary=figures[canary], window=window, at=at)


def decide(slo: Slo, *, stable: Figures, canary: Figures, window: str, at: float) -> Verdict:
    """The decision on measured figures (no I/O)."""
    policy = slo.canary or CanaryPolicy()

    def verdict(decision: Decision, **found: Any) -> Verdict:
        return Verdict(decision, canary=canary, stable=stable, window=window, at=at, **found)

    waiting = _too_few(slo, policy, stable=stable, canary=canary, window=window)
    if waiting:
        return verdict("wait", waiting_for=waiting)
    # past _too_few, every limited quantile has a value on both sides and both served requests: no None below
    failures = []
    for line in QUANTILES:
        allowed = getattr(slo, line)
        if allowed is None:
            continue
        measured, baseline = _known(canary.latency_ms[line]), _known(stable.latency_ms[line])
        run = (canary.run_latency_ms.get(line), stable.run_latency_ms.get(line)) if canary.run_latency_ms else None
        if measured > allowed:
            failures.append(Failure(line, "slo", measured, baseline, allowed, run))
        relative = max(baseline * (1 + policy.latency_tolerance), baseline + policy.latency_slack_ms)
        if measured > relative:
            failures.append(Failure(line, "stable", measured, baseline, relative, run))
    if slo.max_error_rate is not None:
        measured, baseline = _known(canary.error_rate), _known(stable.error_rate)
        if measured > slo.max_error_rate:
            failures.append(Failure("max_error_rate", "slo", measured, baseline, slo.max_error_rate))
        if measured > baseline + policy.error_rate_tolerance:
            failures.append(Failure("max_error_rate", "stable", measured, baseline, baseline + policy.error_rate_tolerance))
    return verdict("fail" if failures else "promote-step", failures=failures)


def _known(value: float | None) -> float:
    if value is None:
        raise AssertionError("a figure the judge needs was not measured (checked by _too_few)")
    return value


def _too_few(slo: Slo, policy: CanaryPolicy, *, stable: Figures, canary: Figures, window: str) -> str | None:
    short = [
        f"{side} {figures.predictor} served {figures.requests:.0f} requests in the last {window}"
        for side, figures in (("canary", canary), ("stable", stable))
        if figures.requests < policy.min_requests
    ]
    if short:
        return f"{'; '.join(short)}; {policy.min_requests} needed per predictor (canary.min_requests)"
    lines = [line for line in QUANTILES if getattr(slo, line) is not None]
    blind = [
        f"{side} {figures.predictor}"
        for side, figures in (("canary", canary), ("stable", stable))
        if any(figures.latency_ms[line] is None for line in lines)
    ]
    if blind:
        return f"no latency observations for {' and '.join(blind)} in the last {window} (the SLO limits {', '.join(lines)})"
    return None


def _ms(value: float | None) -> str:
    return "none" if value is None else f"{value:.2f} ms"


def _rate(value: float | None) -> str:
    return "none" if value is None else f"{value:.2%}"
