"""Usage history from Prometheus `query_range` responses: one series per pod, checked before it is trusted.

A recommendation is only as good as its input, so anything that would silently skew it
(an empty query, a hole in a series, millicores or a raw counter where cores are wanted,
MiB where bytes are wanted, CPU and memory of different pods) stops with one clear line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from deployments.sizing.prometheus import Prometheus, PrometheusError
from slipway.files import FileProblem, read_json

Kind = Literal["cpu", "memory", "rps"]
POD_LABELS = ("pod", "pod_name", "kubernetes_pod_name")
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")
GAP_FACTOR = 3.0  # a hole longer than three scrape steps is missing data, not jitter
MAX_CORES_PER_POD = 256.0
MIN_MEMORY_BYTES = float(2**20)
MAX_MEMORY_BYTES = float(2**44)
HINTS = {
    "cpu": 'cores per pod, e.g. sum by (pod) (rate(container_cpu_usage_seconds_total{container="NAME"}[5m]))',
    "memory": 'bytes per pod, e.g. sum by (pod) (container_memory_working_set_bytes{container="NAME"})',
    "rps": "requests/s, per pod or in total, e.g. sum by (pod) (rate(model_infer_request_success_total[5m]))",
}


class UsageError(ValueError):
    """The usage history cannot be trusted; the message says what is wrong and what to send."""


@dataclass(frozen=True)
class Series:
    """One pod's samples: timestamps in seconds, values in the kind's unit."""

    pod: str
    times: np.ndarray
    values: np.ndarray


class SeriesSet:
    """What a history of several series (pods, or GPUs) offers whatever it measures: its span, its samples pooled,
    and their sum at each timestamp. Mixed into the dataclasses that hold `series`."""

    series: list[Series]

    @property
    def start(self) -> float:
        return min(float(s.times[0]) for s in self.series)

    @property
    def end(self) -> float:
        return max(float(s.times[-1]) for s in self.series)

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every series' samples pooled: (times, values)."""
        return np.concatenate([s.times for s in self.series]), np.concatenate([s.values for s in self.series])

    def total(self) -> tuple[np.ndarray, np.ndarray]:
        """The sum over the series at each timestamp (a series absent at a timestamp adds nothing)."""
        times, values = self.samples()
        stamps, index = np.unique(times, return_inverse=True)
        return stamps, np.bincount(index, weights=values)


@dataclass(frozen=True)
class Usage(SeriesSet):
    """All series of one kind (cpu in cores, memory in bytes, rps in requests/s)."""

    kind: Kind
    source: str
    series: list[Series]
    step_s: float

    @property
    def pods(self) -> set[str]:
        return {s.pod for s in self.series}


def matrix_series(data: object, *, hint: str, source: str) -> list[dict]:
    """The series of a `query_range` answer (or its `data` object) that hold samples; one line for any other shape,
    naming `hint`, the query that would have answered."""
    if isinstance(data, dict) and "status" in data:
        if data.get("status") != "success":
            raise UsageError(f"{source}: Prometheus answered {data.get('status')}: {data.get('error', 'no error text')}")
        data = data.get("data")
    if not isinstance(data, dict) or "resultType" not in data or "result" not in data:
        raise UsageError(
            f"{source} is not a Prometheus query_range response (no data.resultType); send the JSON of "
            f"/api/v1/query_range for {hint}"
        )
    if data["resultType"] != "matrix":
        raise UsageError(
            f"{source} holds a {data['resultType']} result: use /api/v1/query_range (a matrix), not an instant query"
        )
    result = data["result"]
    if not isinstance(result, list) or not all(
        isinstance(item, dict) and isinstance(item.get("metric", {}), dict) for item in result
    ):
        raise UsageError(
            f'{source}: data.result must be a list of series {{"metric": {{labels}}, "values": [[time, "value"], ...]}}; '
            f"send the JSON of /api/v1/query_range for {hint}"
        )
    raw = [item for item in result if item.get("values")]
    if not raw:
        raise UsageError(f"{source} has no samples: the query matched no series; query {hint}")
    return raw


def parse_query_range(data: object, *, kind: Kind, source: str) -> Usage:
    """Validate one `query_range` response (or its `data` object) and return its series."""
    hint = HINTS[kind]
    raw = matrix_series(data, hint=hint, source=source)
    for item in raw:
        name = str(item.get("metric", {}).get("__name__", ""))
        if name.endswith(COUNTER_SUFFIXES):
            raise UsageError(
                f"{source}: {name} is a raw counter (it only grows); wrap it in rate({name}[5m]) to get "
                f"{'cores' if kind == 'cpu' else 'a rate'}"
            )
    pods = [_pod_name(item.get("metric", {})) for item in raw]
    if (None in pods and len(raw) > 1) or len(set(pods)) != len(pods):
        raise UsageError(f"{source}: {len(raw)} series without one distinct pod label each; aggregate with sum by (pod) (...)")
    series, step = checked_series([(pod or "(all pods)", item["values"]) for item, pod in zip(raw, pods)], source=source)
    for one in series:
        _check_units(one, kind, source)
    return Usage(kind=kind, source=source, series=series, step_s=step)


def checked_series(raw: list[tuple[str, list]], *, source: str) -> tuple[list[Series], float]:
    """(name, query_range `values`) pairs as Series and their median step, refusing what would skew any sizing read
    from them (a sample that is not a number, NaN/Inf, time running backwards, holes); units are the caller's."""
    series = [_series(values, name, source=source) for name, values in raw]
    step = _median_step(series)
    for one in series:
        _check_gaps(one, step, source)
    return series, step


def _pod_name(labels: dict) -> str | None:
    for key in POD_LABELS:
        if labels.get(key):
            return str(labels[key])
    return None


def _series(values: list, pod: str, *, source: str) -> Series:
    try:
        times = np.array([float(point[0]) for point in values])
        numbers = np.array([float(point[1]) for point in values])
    except (TypeError, ValueError, IndexError) as err:
        raise UsageError(f'{source}: pod {pod} has a sample that is not [timestamp, "value"]: {err}') from err
    bad = ~np.isfinite(numbers)
    if bad.any():
        raise UsageError(
            f"{source}: pod {pod} has {int(bad.sum())} NaN/Inf samples (first at {_when(times[bad][0])}); "
            "query a range where the metric exists"
        )
    if np.any(np.diff(times) <= 0):
        raise UsageError(f"{source}: pod {pod} has timestamps out of order or repeated")
    return Series(pod, times, numbers)


def _median_step(series: list[Series]) -> float:
    steps = np.concatenate([np.diff(s.times) for s in series if len(s.times) > 1] or [np.array([])])
    if steps.size == 0:
        raise UsageError("every series has a single sample: query a longer range (at least a few steps)")
    return float(np.median(steps))


def _check_gaps(series: Series, step: float, source: str) -> None:
    steps = np.diff(series.times)
    holes = np.flatnonzero(steps > GAP_FACTOR * step)
    if holes.size:
        first = holes[0]
        start, end = series.times[first], series.times[first + 1]
        raise UsageError(
            f"{source}: pod {series.pod} has a gap of {_duration(end - start)} from {_when(start)} to {_when(end)} "
            f"({holes.size} gap(s) longer than {GAP_FACTOR:g} steps of {_duration(step)}); query a range without "
            "missing scrapes, or a coarser step"
        )


def _check_units(series: Series, kind: Kind, source: str) -> None:
    values, pod = series.values, series.pod
    if values.min() < 0:
        raise UsageError(f"{source}: pod {pod} has negative {kind} values; send {HINTS[kind]}")
    peak = float(values.max())
    if kind == "cpu" and peak > MAX_CORES_PER_POD:
        raise UsageError(
            f"{source}: pod {pod} uses up to {peak:g} 'cores': values look like millicores (or CPU "
            "seconds without rate()); send cores (divide millicores by 1000)"
        )
    if kind == "memory" and 0 < peak < MIN_MEMORY_BYTES:
        raise UsageError(
            f"{source}: pod {pod} peaks at {peak:g}, under 1 MiB: memory must be in bytes "
            "(values look like MiB or GiB); send container_memory_working_set_bytes"
        )
    if kind == "memory" and peak > MAX_MEMORY_BYTES:
        raise UsageError(f"{source}: pod {pod} peaks at {peak:g} bytes (over 16 TiB): not bytes of one pod")


def load_usage(path: Path, kind: Kind) -> Usage:
    """Read a saved `query_range` JSON file."""
    try:
        data = read_json(path)
    except FileProblem as err:
        raise UsageError(f"{err}; save the JSON of /api/v1/query_range for {HINTS[kind]}") from err
    return parse_query_range(data, kind=kind, source=str(path))


def fetch_usage(
    url: str | Prometheus, query: str, *, kind: Kind, start: float, end: float, step_s: float, timeout_s: float = 30
) -> Usage:
    """Run one `query_range` against a Prometheus server (a URL: with the credentials the environment holds,
    see deployments/sizing/prometheus.py)."""
    try:
        server = url if isinstance(url, Prometheus) else Prometheus.from_env(url, timeout_s=timeout_s)
        data = server.query_range(query, start=start, end=end, step_s=step_s)
    except PrometheusError as err:
        raise UsageError(f"{kind} query: {err}") from err
    return parse_query_range(data, kind=kind, source=f"{kind} query at {server.url}")


def check_same_pods(cpu: Usage, memory: Usage, rps: Usage | None) -> None:
    """CPU and memory must describe the same pods; per-pod requests/s too (a single total is fine)."""
    if cpu.pods != memory.pods:
        raise UsageError(
            f"cpu and memory describe different pods: only in cpu {sorted(cpu.pods - memory.pods)[:5]}, only in memory "
            f"{sorted(memory.pods - cpu.pods)[:5]}; query both for the same workload and range"
        )
    if rps is not None and len(rps.series) > 1 and rps.pods != cpu.pods:
        raise UsageError(
            f"requests/s series name pods {sorted(rps.pods)[:5]} but cpu has {sorted(cpu.pods)[:5]}; "
            "query the same pods, or send the total as one series"
        )
    if min(cpu.end, memory.end) <= max(cpu.start, memory.start):
        raise UsageError("cpu and memory histories do not overlap in time; query the same range for both")


def _when(timestamp: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(timestamp))


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def parse_duration(text: str) -> float:
    """`30s`, `5m`, `24h`, `7d` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a duration; write e.g. 30s, 5m, 24h or 7d") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{text!r} must be a positive duration")
    return value
