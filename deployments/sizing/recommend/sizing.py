"""The sizing arithmetic of `make recommend`: pure functions from usage history to requests, limits and replicas.

CPU follows the Kubernetes VPA recommender: every pod's samples go into one histogram with
exponentially growing buckets, weighted so a sample loses half its weight every half-life
(recent behaviour counts most), and the request is a high percentile of it plus a safety
margin. Memory is sized from peaks (the largest sample per pod per window) plus a margin, as
VPA does, since running out of memory kills a pod while running out of CPU only slows it.
Replica bounds come from the traffic's trough and peak over the per-replica capacity that
`make tune` measured (`reports/tune.json`), or `--capacity-rps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from deployments.render.autoscaling import RPS_METRIC
from deployments.sizing.recommend.gpu_sizing import GPUS_PER_REPLICA, GpuRecommendation
from deployments.sizing.usage import Usage

FIRST_BUCKET_CORES = 0.01  # VPA's CPU histogram: 10 millicores first bucket...
BUCKET_GROWTH = 1.05  # ...each bucket 5% wider than the one before
HALF_LIFE_S = 24 * 3600.0
CPU_REQUEST_PERCENTILE = 0.90
CPU_LIMIT_PERCENTILE = 0.99
MEMORY_WINDOW_S = 24 * 3600.0
MEMORY_REQUEST_PERCENTILE = 0.90
SAFETY_MARGIN = 0.15
TARGET_UTILIZATION = 0.70  # replicas are sized to run at 70% of their capacity at the peak
MIN_CPU_CORES = 0.01


class RecommendError(ValueError):
    """Not enough to recommend from (e.g. no per-replica capacity); the message says what to give."""


class DecayingHistogram:
    """Exponential buckets of CPU cores with weights that halve every `half_life_s` into the past."""

    def __init__(self, *, first: float = FIRST_BUCKET_CORES, growth: float = BUCKET_GROWTH, half_life_s: float = HALF_LIFE_S):
        self.first, self.growth, self.half_life_s = first, growth, half_life_s

    def bucket_upper(self, index: np.ndarray) -> np.ndarray:
        return self.first * self.growth ** (index + 1)

    def percentile(self, times: np.ndarray, values: np.ndarray, fraction: float, *, reference: float) -> float:
        """The upper bound of the bucket where the weighted cumulative share reaches `fraction`."""
        weights = np.exp2((times - reference) / self.half_life_s)
        index = np.where(
            values <= self.first, 0, np.ceil(np.log(np.maximum(values, self.first) / self.first) / math.log(self.growth)) - 1
        ).astype(int)
        index = np.maximum(index, 0)
        totals = np.bincount(index, weights=weights)
        cumulative = np.cumsum(totals) / totals.sum()
        bucket = int(np.searchsorted(cumulative, fraction - 1e-12))
        return float(self.bucket_upper(np.array(bucket)))


@dataclass
class Recommendation:
    cpu_request: float
    cpu_limit: float
    memory_request: float
    memory_limit: float
    min_replicas: int
    max_replicas: int
    capacity_rps: float
    capacity_source: str
    hpa: dict[str, Any]
    reasoning: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    gpu: GpuRecommendation | None = None  # with GPU histories: the replicas above are the GPU overlay's

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_request": round(self.cpu_request, 4),
            "cpu_limit": round(self.cpu_limit, 4),
            "memory_request": int(self.memory_request),
            "memory_limit": int(self.memory_limit),
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "capacity_rps": self.capacity_rps,
            "capacity_source": self.capacity_source,
            "hpa": self.hpa,
            "units": {"cpu": "cores", "memory": "bytes"},
            "reasoning": self.reasoning,
            "warnings": self.warnings,
            "inputs": self.inputs,
            "gpu": self.gpu.as_dict() if self.gpu is not None else None,
        }


def recommend_cpu(
    cpu: Usage, *, half_life_s: float = HALF_LIFE_S, margin: float = SAFETY_MARGIN
) -> tuple[float, float, list[str]]:
    """(request, limit, reasoning) in cores, from a decaying histogram of every pod's samples."""
    times, values = cpu.samples()
    histogram = DecayingHistogram(half_life_s=half_life_s)
    request_base = histogram.percentile(times, values, CPU_REQUEST_PERCENTILE, reference=cpu.end)
    limit_base = histogram.percentile(times, values, CPU_LIMIT_PERCENTILE, reference=cpu.end)
    request = max(MIN_CPU_CORES, request_base * (1 + margin))
    limit = max(request, limit_base * (1 + margin))
    why = [
        (
            f"CPU: {values.size} samples from {len(cpu.series)} pod(s) in a histogram with {BUCKET_GROWTH - 1:.0%}-wide buckets, "
            f"weights halving every {half_life_s / 3600:g} h; p{CPU_REQUEST_PERCENTILE * 100:g} = {request_base:.3f} cores, "
            f"+{margin:.0%} margin -> request {request:.3f} cores"
        ),
        (
            f"CPU limit: p{CPU_LIMIT_PERCENTILE * 100:g} = {limit_base:.3f} cores, +{margin:.0%} -> {limit:.3f} cores "
            f"(the highest sample was {values.max():.3f})"
        ),
    ]
    return request, limit, why


def recommend_memory(
    memory: Usage, *, window_s: float = MEMORY_WINDOW_S, half_life_s: float = HALF_LIFE_S, margin: float = SAFETY_MARGIN
) -> tuple[float, float, list[str]]:
    """(request, limit, reasoning) in bytes, from per-pod peaks per window."""
    peak_times, peaks = [], []
    for series in memory.series:
        window = np.floor((series.times - memory.start) / window_s).astype(int)
        for bucket in np.unique(window):
            chosen = window == bucket
            peak_times.append(float(series.times[chosen].max()))
            peaks.append(float(series.values[chosen].max()))
    times, values = np.array(peak_times), np.array(peaks)
    weights = np.exp2((times - memory.end) / half_life_s)
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    request_base = float(values[order][np.searchsorted(cumulative, MEMORY_REQUEST_PERCENTILE - 1e-12)])
    request = request_base * (1 + margin)
    limit = max(request, float(values.max()) * (1 + margin))
    why = [
        (
            f"memory: {len(peaks)} peaks (max per pod per {window_s / 3600:g} h window); weighted p{MEMORY_REQUEST_PERCENTILE * 100:g} "
            f"of peaks = {mib(request_base)}, +{margin:.0%} -> request {mib(request)}"
        ),
        f"memory limit: the highest peak {mib(values.max())} +{margin:.0%} -> {mib(limit)} (a pod over its limit is killed)",
    ]
    return request, limit, why


def recommend_replicas(
    rps: Usage, capacity_rps: float, *, utilization: float = TARGET_UTILIZATION, margin: float = SAFETY_MARGIN, min_floor: int = 1
) -> tuple[int, int, list[str]]:
    """(min, max, reasoning) replicas so each runs at `utilization` of its capacity at the trough and at the peak."""
    times, total = rps.total()
    target = capacity_rps * utilization
    peak, trough = float(total.max()), float(total.min())
    max_replicas = max(min_floor, math.ceil(peak * (1 + margin) / target))
    min_replicas = min(max_replicas, max(min_floor, math.ceil(trough / target)))
    why = [
        f"traffic: peak {peak:.1f} req/s, trough {trough:.1f} req/s over {(times[-1] - times[0]) / 3600:.1f} h",
        (
            f"replicas: {capacity_rps:g} req/s per replica at the SLO x {utilization:.0%} target = {target:.1f} req/s each; "
            f"max = ceil(peak x {1 + margin:.2f} / {target:.1f}) = {max_replicas}, min = ceil(trough / {target:.1f}) = {min_replicas}"
        ),
    ]
    half = len(total) // 2
    if half >= 2 and total[:half].mean() > 0 and total[half:].max() > 1.5 * total[:half].max():
        why.append(
            f"traffic grew: the second half peaked at {total[half:].max() / total[:half].max():.1f}x the first; "
            "revisit max replicas as it keeps growing"
        )
    return min_replicas, max_replicas, why


def is_capacity(value: object) -> bool:
    """A per-replica capacity the replica arithmetic can use: a finite number of requests/s above 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def recommend(
    cpu: Usage,
    memory: Usage,
    rps: Usage,
    *,
    capacity_rps: float | None,
    capacity_source: str = "--capacity-rps",
    hpa_metric: str = "cpu",
    rps_metric: str = RPS_METRIC,
    half_life_s: float = HALF_LIFE_S,
    margin: float = SAFETY_MARGIN,
    min_floor: int = 1,
) -> Recommendation:
    """The whole recommendation, with its reasoning and warnings."""
    from deployments.sizing.usage import check_same_pods
    from slipway import seldon_patch

    check_same_pods(cpu, memory, rps)
    if capacity_rps is None:
        raise RecommendError("no per-replica capacity: run `make tune` (it writes reports/tune.json) or pass --capacity-rps N")
    if not is_capacity(capacity_rps):
        raise RecommendError(
            f"{capacity_source} gives a per-replica capacity of {capacity_rps!r}: it must be a finite number "
            "of requests/s above 0, e.g. --capacity-rps 40"
        )
    cpu_request, cpu_limit, cpu_why = recommend_cpu(cpu, half_life_s=half_life_s, margin=margin)
    memory_request, memory_limit, memory_why = recommend_memory(memory, half_life_s=half_life_s, margin=margin)
    min_replicas, max_replicas, replica_why = recommend_replicas(rps, capacity_rps, margin=margin, min_floor=min_floor)
    warnings = []
    hpa_why = []
    target_rps = capacity_rps * TARGET_UTILIZATION
    if hpa_metric == "rps":
        metric = seldon_patch.pods_metric(rps_metric, round(target_rps, 1))
    else:
        hpa_why.append(
            f"HPA: CPU utilization of the model container (ContainerResource); no memory target: this memory request "
            f"puts the p{MEMORY_REQUEST_PERCENTILE * 100:g} daily peak at {100 / (1 + margin):.0f}% of it, where a memory target would hold up "
            "replicas that CPU no longer asks for (the HPA follows whichever metric asks for more)"
        )
        needed = (_cores_per_request(cpu, rps) or 0.0) * target_rps
        share = round(100 * needed / cpu_request)
        utilization = int(min(95, max(10, share))) if needed else 70
        metric = seldon_patch.cpu_utilization_metric(utilization)
        warnings.append(
            f"the HPA scales on CPU utilization = usage / request, so this CPU request ({cpu_request:.3f} cores) moves its "
            f"scaling point: at {target_rps:.0f} req/s a pod uses about {needed:.3f} cores, {share}% of the request; the "
            f"patch sets averageUtilization to {utilization}. Do not also run a VPA in Auto mode on CPU (the two would "
            "chase each other); scaling on requests/s (--hpa-metric rps) avoids the coupling"
        )
        if needed > cpu_request:
            warnings.append(
                f"at the HPA's target of {target_rps:.0f} req/s a pod needs about {needed:.3f} cores, more than this request: "
                "the pods in the history ran below that load; expect usage (and the next recommendation) to rise"
            )
    if cpu_limit > 0 and cpu_request / cpu_limit < 0.25:
        warnings.append(
            f"CPU limit is {cpu_limit / cpu_request:.1f}x the request: usage is spiky; expect throttling at the limit"
        )
    hpa = {"minReplicas": min_replicas, "maxReplicas": max_replicas, "metricsv2": [metric]}
    inputs = {
        kind: {
            "source": usage.source,
            "pods": sorted(usage.pods),
            "samples": int(sum(s.values.size for s in usage.series)),
            "step_s": usage.step_s,
            "start": usage.start,
            "end": usage.end,
        }
        for kind, usage in (("cpu", cpu), ("memory", memory), ("rps", rps))
    }
    return Recommendation(
        cpu_request=cpu_request,
        cpu_limit=cpu_limit,
        memory_request=memory_request,
        memory_limit=memory_limit,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        capacity_rps=capacity_rps,
        capacity_source=capacity_source,
        hpa=hpa,
        reasoning=cpu_why + memory_why + replica_why + hpa_why,
        warnings=warnings,
        inputs=inputs,
    )


def _cores_per_request(cpu: Usage, rps: Usage) -> float | None:
    """CPU seconds per request over the history: what one request costs."""
    _, cpu_total = cpu.total()
    _, rps_total = rps.total()
    if rps_total.mean() <= 0:
        return None
    return float(cpu_total.mean() / rps_total.mean())


def mib(size: float) -> str:
    """Bytes as whole MiB, for reasoning lines and plot labels."""
    return f"{size / 2**20:.0f} MiB"


def with_gpu(rec: Recommendation, gpu: GpuRecommendation) -> Recommendation:
    """`rec` for the gpu overlay: each replica bound the larger of what the request rate and the GPUs ask for (a
    replica must carry its share of requests and keep its card at the target), the HPA's range with it."""
    min_replicas = max(rec.min_replicas, gpu.min_replicas)
    max_replicas = max(rec.max_replicas, gpu.max_replicas, min_replicas)
    sets = [
        name for name, bound in (("the request rate", rec.max_replicas), ("the GPUs", gpu.max_replicas)) if bound == max_replicas
    ]
    line = (
        f"gpu overlay: {GPUS_PER_REPLICA} nvidia.com/gpu per replica, replicas {min_replicas}-{max_replicas} (requests "
        f"{rec.min_replicas}-{rec.max_replicas}, GPUs {gpu.min_replicas}-{gpu.max_replicas}: the max set by "
        f"{' and '.join(sets)})"
    )
    return replace(
        rec,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        gpu=gpu,
        hpa={**rec.hpa, "minReplicas": min_replicas, "maxReplicas": max_replicas},
        reasoning=[*rec.reasoning, *gpu.reasoning, line],
        warnings=[*rec.warnings, *gpu.warnings],
    )
