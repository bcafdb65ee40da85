"""Figures for one step of load, cut out of Locust's running totals, and the saturation rule.

Locust keeps cumulative counts and a histogram of response times (ms -> count). Two
snapshots of them, taken at a step's start and end, give that step alone: its throughput,
percentiles and failures, without restarting Locust between steps.

Locust files each response time under a rounded key (`locust.stats.bucket_response_time`):
whole milliseconds below 100 ms, so a server answering in 0.4 ms would read 0 ms. The shape
installs `bucket_ms` in its place, which keeps two significant digits below 1 ms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

PERCENTILES = {"p50_ms": 0.50, "p90_ms": 0.90, "p95_ms": 0.95, "p99_ms": 0.99}


def bucket_ms(response_time: float, coarse: Callable[[float], float]) -> float:
    """The histogram key for a response time in ms: two significant digits below 1 ms, `coarse`'s from 1 ms up.

    `coarse` is Locust's own rounding (whole ms below 100 ms, then two significant digits: 147 -> 150,
    3432 -> 3400), kept from 1 ms up so those figures read as Locust's own reports do. Below 1 ms it
    says 0 or 1; here 0.4371 -> 0.44 and 0.0528 -> 0.053. Keys stay few (90 per decade below 1 ms),
    which matters in distributed mode, where workers send their histograms to the master.
    """
    if response_time >= 1:
        return coarse(response_time)
    if response_time <= 0:
        return 0.0
    return round(response_time, 1 - math.floor(math.log10(response_time)))


@dataclass(frozen=True)
class Snapshot:
    """Locust's totals at one moment (and the watched server's CPU seconds, when known)."""

    at_s: float
    requests: int
    failures: int
    response_times: dict[float, int]
    cpu_s: float | None = None


@dataclass(frozen=True)
class StepFigures:
    """What one step of constant load measured."""

    index: int
    name: str
    users: int
    started_s: float
    duration_s: float
    requests: int
    failures: int
    rps: float
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    server_cpu_cores: float | None = None

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    @property
    def rps_per_core(self) -> float | None:
        if not self.server_cpu_cores:
            return None
        return self.rps / self.server_cpu_cores

    def as_dict(self) -> dict:
        return {**asdict(self), "error_rate": self.error_rate, "rps_per_core": self.rps_per_core}

    @classmethod
    def from_dict(cls, data: dict) -> StepFigures:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in names})


def percentile(histogram: Mapping[float, int], fraction: float) -> float | None:
    """The smallest response time that `fraction` of the requests finished within."""
    total = sum(histogram.values())
    if total == 0:
        return None
    wanted = fraction * total
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= wanted:
            return float(value)
    return float(max(histogram))


def percentiles(histogram: Mapping[float, int]) -> dict[str, float | None]:
    """p50/p90/p95/p99 (ms) of a histogram, keyed as the figures name them; None where it counted nothing."""
    return {key: percentile(histogram, fraction) for key, fraction in PERCENTILES.items()}


def figures_between(start: Snapshot, end: Snapshot, *, index: int, name: str, users: int, origin_s: float = 0.0) -> StepFigures:
    """One step's figures: the difference between two snapshots of Locust's totals."""
    seconds = max(end.at_s - start.at_s, 1e-9)
    histogram = {
        value: count - start.response_times.get(value, 0)
        for value, count in end.response_times.items()
        if count - start.response_times.get(value, 0) > 0
    }
    cores = None
    if start.cpu_s is not None and end.cpu_s is not None:
        cores = round(max(end.cpu_s - start.cpu_s, 0.0) / seconds, 4)
    requests = end.requests - start.requests
    return StepFigures(
        index=index,
        name=name,
        users=users,
        started_s=round(start.at_s - origin_s, 3),
        duration_s=round(seconds, 3),
        requests=requests,
        failures=end.failures - start.failures,
        rps=round(requests / seconds, 3),
        server_cpu_cores=cores,
        **percentiles(histogram),
    )


@dataclass(frozen=True)
class Saturation:
    """Where more load stopped buying throughput (perf_analyzer / Model Analyzer's rule)."""

    saturated: bool
    reason: str
    step: int | None = None
    users: int | None = None
    rps: float | None = None
    p95_ms: float | None = None
    best_rps: float | None = None
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def throughput_gain(steps: list[StepFigures], window: int) -> float | None:
    """Relative gain of the best of the last `window` steps over the first of them."""
    if len(steps) < window:
        return None
    last = steps[-window:]
    first = last[0].rps
    if first <= 0:
        return float("inf") if max(step.rps for step in last) > 0 else 0.0
    return max(step.rps for step in last) / first - 1.0


def is_saturated(steps: list[StepFigures], *, window: int, min_gain: float) -> bool:
    """True once throughput grew by less than `min_gain` over the last `window` steps."""
    gain = throughput_gain(steps, window)
    return gain is not None and gain < min_gain


def saturation_point(steps: list[StepFigures], *, window: int, min_gain: float) -> Saturation:
    """The least load that reaches (within `min_gain`) the best throughput seen, once saturated.

    Past that point more users only add queueing: latency rises, throughput does not.
    """
    if not steps:
        return Saturation(False, "no step was measured")
    best = max(steps, key=lambda step: step.rps)
    gain = throughput_gain(steps, window)
    if gain is None or gain >= min_gain:
        text = f"{gain:.1%}" if gain is not None and gain != float("inf") else "n/a"
        return Saturation(
            False,
            f"throughput still grew {text} over the last {min(window, len(steps))} steps: "
            f"not saturated by {steps[-1].users} users (raise max users)",
            best_rps=best.rps,
        )
    knee = next(step for step in steps if step.rps >= (1 - min_gain) * best.rps)
    return Saturation(
        True,
        f"throughput grew {gain:.1%} (< {min_gain:.0%}) over the last {window} steps",
        step=knee.index,
        users=knee.users,
        rps=knee.rps,
        p95_ms=knee.p95_ms,
        best_rps=best.rps,
        details={"gain": round(gain, 4), "window": window, "min_gain": min_gain},
    )
