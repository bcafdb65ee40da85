"""Recommend CPU/memory requests and limits and HPA replica bounds from usage history.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deployments.autoscaling import REQUEST_COUNTER, RPS_METRIC
from deployments.usage import Usage, UsageError

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
        index = np.where(values <= self.first, 0, np.ceil(np.log(np.maximum(values, self.first) / self.first)
                                                           / math.log(self.growth)) - 1).astype(int)
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
        }


def recommend_cpu(cpu: Usage, *, half_life_s: float = HALF_LIFE_S, margin: float = SAFETY_MARGIN) -> tuple[float, float, list[str]]:
    """(request, limit, reasoning) in cores, from a decaying histogram of every pod's samples."""
    times, values = cpu.samples()
    histogram = DecayingHistogram(half_life_s=half_life_s)
    request_base = histogram.percentile(times, values, CPU_REQUEST_PERCENTILE, reference=cpu.end)
    limit_base = histogram.percentile(times, values, CPU_LIMIT_PERCENTILE, reference=cpu.end)
    request = max(MIN_CPU_CORES, request_base * (1 + margin))
    limit = max(request, limit_base * (1 + margin))
    why = [
        f"CPU: {values.size} samples from {len(cpu.series)} pod(s) in a histogram with {BUCKET_GROWTH - 1:.0%}-wide buckets, "
        f"weights halving every {half_life_s / 3600:g} h; p{CPU_REQUEST_PERCENTILE * 100:g} = {request_base:.3f} cores, "
        f"+{margin:.0%} margin -> request {request:.3f} cores",
        f"CPU limit: p{CPU_LIMIT_PERCENTILE * 100:g} = {limit_base:.3f} cores, +{margin:.0%} -> {limit:.3f} cores "
        f"(the highest sample was {values.max():.3f})",
    ]
    return request, limit, why


def recommend_memory(memory: Usage, *, window_s: float = MEMORY_WINDOW_S, half_life_s: float = HALF_LIFE_S,
                     margin: float = SAFETY_MARGIN) -> tuple[float, float, list[str]]:
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
        f"memory: {len(peaks)} peaks (max per pod per {window_s / 3600:g} h window); weighted p{MEMORY_REQUEST_PERCENTILE * 100:g} "
        f"of peaks = {_mib(request_base)}, +{margin:.0%} -> request {_mib(request)}",
        f"memory limit: the highest peak {_mib(values.max())} +{margin:.0%} -> {_mib(limit)} (a pod over its limit is killed)",
    ]
    return request, limit, why


def recommend_replicas(rps: Usage, capacity_rps: float, *, utilization: float = TARGET_UTILIZATION,
                       margin: float = SAFETY_MARGIN, min_floor: int = 1) -> tuple[int, int, list[str]]:
    """(min, max, reasoning) replicas so each runs at `utilization` of its capacity at the trough and at the peak."""
    times, total = rps.total()
    target = capacity_rps * utilization
    peak, trough = float(total.max()), float(total.min())
    max_replicas = max(min_floor, math.ceil(peak * (1 + margin) / target))
    min_replicas = min(max_replicas, max(min_floor, math.ceil(trough / target)))
    why = [
        f"traffic: peak {peak:.1f} req/s, trough {trough:.1f} req/s over {(times[-1] - times[0]) / 3600:.1f} h",
        f"replicas: {capacity_rps:g} req/s per replica at the SLO x {utilization:.0%} target = {target:.1f} req/s each; "
        f"max = ceil(peak x {1 + margin:.2f} / {target:.1f}) = {max_replicas}, min = ceil(trough / {target:.1f}) = {min_replicas}",
    ]
    half = len(total) // 2
    if half >= 2 and total[:half].mean() > 0 and total[half:].max() > 1.5 * total[:half].max():
        why.append(f"traffic grew: the second half peaked at {total[half:].max() / total[:half].max():.1f}x the first; "
                   "revisit max replicas as it keeps growing")
    return min_replicas, max_replicas, why


def capacity_from_tune(reports_dir: Path | None = None) -> float | None:
    """The per-replica capacity at the SLO that `make tune` measured, if it ran."""
    from slipway.paths import REPORTS_DIR
    from slipway.reports import read_report

    report = read_report("tune", reports_dir) or {}
    deployment = report.get("deployment") or {}
    capacity = deployment.get("per_replica_capacity_rps") if isinstance(deployment, dict) else deployment
    if capacity is not None and not _is_capacity(capacity):  # a hand-edited or foreign report: not a number to size on
        report_path = Path(reports_dir or REPORTS_DIR) / "tune.json"
        raise RecommendError(f"{report_path} gives deployment.per_replica_capacity_rps {capacity!r}, not a number of "
                             "requests/s above 0: run `make tune` again, or pass --capacity-rps N")
    return capacity


def _is_capacity(value: object) -> bool:
    """A per-replica capacity the replica arithmetic can use: a finite number of requests/s above 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def recommend(cpu: Usage, memory: Usage, rps: Usage, *, capacity_rps: float | None, capacity_source: str = "--capacity-rps",
              hpa_metric: str = "cpu", rps_metric: str = RPS_METRIC, half_life_s: float = HALF_LIFE_S,
              margin: float = SAFETY_MARGIN, min_floor: int = 1) -> Recommendation:
    """The whole recommendation, with its reasoning and warnings."""
    from deployments.usage import check_same_pods
    from slipway import seldon_patch

    check_same_pods(cpu, memory, rps)
    if capacity_rps is None:
        raise RecommendError("no per-replica capacity: run `make tune` (it writes reports/tune.json) or pass --capacity-rps N")
    if not _is_capacity(capacity_rps):
        raise RecommendError(f"{capacity_source} gives a per-replica capacity of {capacity_rps!r}: it must be a finite number "
                             "of requests/s above 0, e.g. --capacity-rps 40")
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
        warnings.append(f"CPU limit is {cpu_limit / cpu_request:.1f}x the request: usage is spiky; expect throttling at the limit")
    hpa = {"minReplicas": min_replicas, "maxReplicas": max_replicas, "metricsv2": [metric]}
    inputs = {
        kind: {"source": usage.source, "pods": sorted(usage.pods), "samples": int(sum(s.values.size for s in usage.series)),
               "step_s": usage.step_s, "start": usage.start, "end": usage.end}
        for kind, usage in (("cpu", cpu), ("memory", memory), ("rps", rps))
    }
    return Recommendation(
        cpu_request=cpu_request, cpu_limit=cpu_limit, memory_request=memory_request, memory_limit=memory_limit,
        min_replicas=min_replicas, max_replicas=max_replicas, capacity_rps=capacity_rps, capacity_source=capacity_source,
        hpa=hpa, reasoning=cpu_why + memory_why + replica_why + hpa_why, warnings=warnings, inputs=inputs,
    )


def _cores_per_request(cpu: Usage, rps: Usage) -> float | None:
    """CPU seconds per request over the history: what one request costs."""
    _, cpu_total = cpu.total()
    _, rps_total = rps.total()
    if rps_total.mean() <= 0:
        return None
    return float(cpu_total.mean() / rps_total.mean())


def write_outputs(rec: Recommendation, cpu: Usage, memory: Usage, rps: Usage, *, model: str, out_dir: Path,
                  reports_dir: Path | None = None) -> Path:
    """reports/recommend.json + .png and a kustomize overlay (build/recommend/overlay) applying it."""
    from slipway import seldon_patch
    from slipway.paths import REPORTS_DIR
    from slipway.reports import write_report

    from deployments.render import OVERLAYS_DIR

    reports_dir = Path(reports_dir or REPORTS_DIR)
    ops = [
        seldon_patch.resources_op(cpu_request=rec.cpu_request, cpu_limit=rec.cpu_limit,
                                  memory_request=rec.memory_request, memory_limit=rec.memory_limit),
        *seldon_patch.hpa_ops(min_replicas=rec.min_replicas, max_replicas=rec.max_replicas, metrics=rec.hpa["metricsv2"]),
    ]
    comment = "Written by `make recommend` from usage history.\n" + "\n".join(rec.reasoning + rec.warnings)
    patch, kustomization = seldon_patch.write_overlay(Path(out_dir) / "overlay", ops, base=OVERLAYS_DIR / "cpu", comment=comment)
    plot = reports_dir / "recommend.png"
    plot_recommendation(rec, cpu, memory, rps, plot)
    return write_report("recommend", {**rec.as_dict(), "model": model, "kustomize_patch": str(patch),
                                      "kustomization": str(kustomization), "plot": str(plot)}, reports_dir)


def plot_recommendation(rec: Recommendation, cpu: Usage, memory: Usage, rps: Usage, path: Path) -> None:
    """Usage per pod against the recommended requests and limits, and traffic against replica capacity."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    figure, (cpu_axis, memory_axis, rps_axis) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    origin = min(cpu.start, memory.start, rps.start)
    hours = lambda times: (times - origin) / 3600  # noqa: E731
    for series in cpu.series:
        cpu_axis.plot(hours(series.times), series.values, lw=0.8, alpha=0.7)
    cpu_axis.axhline(rec.cpu_request, color="tab:green", ls="--", label=f"request {rec.cpu_request:.3f}")
    cpu_axis.axhline(rec.cpu_limit, color="tab:red", ls=":", label=f"limit {rec.cpu_limit:.3f}")
    cpu_axis.set_ylabel("CPU (cores per pod)")
    for series in memory.series:
        memory_axis.plot(hours(series.times), series.values / 2**20, lw=0.8, alpha=0.7)
    memory_axis.axhline(rec.memory_request / 2**20, color="tab:green", ls="--", label=f"request {_mib(rec.memory_request)}")
    memory_axis.axhline(rec.memory_limit / 2**20, color="tab:red", ls=":", label=f"limit {_mib(rec.memory_limit)}")
    memory_axis.set_ylabel("memory (MiB per pod)")
    times, total = rps.total()
    rps_axis.plot(hours(times), total, color="tab:blue", lw=0.8, label="total requests/s")
    per_replica = rec.capacity_rps * TARGET_UTILIZATION
    rps_axis.axhline(rec.min_replicas * per_replica, color="tab:green", ls="--", label=f"min {rec.min_replicas} replicas")
    rps_axis.axhline(rec.max_replicas * per_replica, color="tab:red", ls=":", label=f"max {rec.max_replicas} replicas")
    rps_axis.set_ylabel("requests/s")
    rps_axis.set_xlabel("hours")
    for axis in (cpu_axis, memory_axis, rps_axis):
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=8, loc="upper left")
    figure.suptitle("usage against the recommendation")
    save_png(figure, path, dpi=100)


def _mib(size: float) -> str:
    return f"{size / 2**20:.0f} MiB"


DEFAULT_QUERIES = {
    "cpu": 'sum by (pod) (rate(container_cpu_usage_seconds_total{{namespace="{namespace}",container="{model}"}}[5m]))',
    "memory": 'sum by (pod) (container_memory_working_set_bytes{{namespace="{namespace}",container="{model}"}})',
    "rps": 'sum by (pod) (rate(' + REQUEST_COUNTER + '{{namespace="{namespace}",model_name="{model}"}}[5m]))',
}


def add_command(commands) -> None:
    """Register `python -m deployments recommend`."""
    from slipway.paths import BUILD_DIR

    parser = commands.add_parser(
        "recommend", help="recommend requests, limits and HPA replicas from usage history",
        description=__doc__.split("\n\n")[0] + " Give the three histories as Prometheus query_range JSON files, or set "
        "PROMETHEUS_URL to query them.",
    )
    history = parser.add_argument_group("usage history (files, or PROMETHEUS_URL)")
    history.add_argument("--cpu", type=Path, help="query_range JSON: CPU cores per pod")
    history.add_argument("--memory", type=Path, help="query_range JSON: memory bytes per pod (working set)")
    history.add_argument("--rps", type=Path, help="query_range JSON: requests/s, per pod or in total")
    history.add_argument("--prometheus-url", help="default: $PROMETHEUS_URL; credentials from $PROMETHEUS_TOKEN (bearer) "
                         "or $PROMETHEUS_USERNAME and $PROMETHEUS_PASSWORD (basic auth)")
    history.add_argument("--namespace", default="slipway", help="where the model runs (default slipway, as make deploy)")
    history.add_argument("--model", default="digits", help="the SeldonDeployment / container / model name")
    history.add_argument("--range", default="7d", help="how far back to query (e.g. 24h, 7d)")
    history.add_argument("--step", default="5m", help="query resolution")
    for kind in DEFAULT_QUERIES:
        history.add_argument(f"--{kind}-query", help=f"PromQL for {kind} (default: {DEFAULT_QUERIES[kind]})")
    knobs = parser.add_argument_group("recommendation")
    knobs.add_argument("--capacity-rps", type=float, help="per-replica capacity at the SLO (default: reports/tune.json)")
    knobs.add_argument("--hpa-metric", choices=["cpu", "rps"], default="cpu", help="what the HPA scales on")
    knobs.add_argument("--rps-metric", default=RPS_METRIC, help=f"with --hpa-metric rps: the per-pod metric (default {RPS_METRIC}, "
                       "the prometheus-adapter rule `make manifests AUTOSCALING=rps` renders)")
    knobs.add_argument("--half-life", default="24h", help="CPU histogram: a sample's weight halves every this long")
    knobs.add_argument("--margin", type=float, default=SAFETY_MARGIN, help="safety margin on top (0.15 = 15%%)")
    knobs.add_argument("--min-replicas-floor", type=int, default=1, help="never recommend fewer replicas (2 for HA)")
    parser.add_argument("--json", action="store_true", help="print the recommendation as JSON on stdout")
    parser.add_argument("--out-dir", type=Path, default=BUILD_DIR / "recommend", help="the kustomize overlay goes here")
    parser.set_defaults(func=cmd_recommend)


def _check_out_dir(out_dir: Path) -> None:
    """Refuse an --out-dir that cannot hold the overlay (it or a folder above it is a file) before any work."""
    from slipway.atomic import file_in_the_way

    overlay = Path(out_dir) / "overlay"
    folder = overlay if overlay.exists() and not overlay.is_dir() else file_in_the_way(overlay)
    if folder is not None:
        raise RecommendError(f"--out-dir {out_dir}: {folder} is a file; name a folder for the overlay (default build/recommend)")


def cmd_recommend(args) -> int:
    import json
    import os
    import sys
    import time

    from deployments.usage import fetch_usage, load_usage, parse_duration
    from slipway.cli import UserError, console

    try:
        _check_out_dir(args.out_dir)
        files = {"cpu": args.cpu, "memory": args.memory, "rps": args.rps}
        url = args.prometheus_url or os.environ.get("PROMETHEUS_URL")
        if all(files.values()):
            usage = {kind: load_usage(path, kind) for kind, path in files.items()}
        elif any(files.values()):
            missing = [f"--{kind}" for kind, path in files.items() if not path]
            raise UsageError(f"give all three histories: {', '.join(missing)} missing (or none, with PROMETHEUS_URL set)")
        elif url:
            end = time.time()
            start, step = end - parse_duration(args.range), parse_duration(args.step)
            usage = {}
            for kind, default in DEFAULT_QUERIES.items():
                query = getattr(args, f"{kind}_query") or default.format(namespace=args.namespace, model=args.model)
                usage[kind] = fetch_usage(url, query, kind=kind, start=start, end=end, step_s=step)
        else:
            raise UsageError("no usage history: give --cpu F --memory F --rps F (Prometheus query_range JSON) or set PROMETHEUS_URL")
        if not 0 <= args.margin <= 2 or args.min_replicas_floor < 1:
            raise UsageError("--margin must be within 0..2 and --min-replicas-floor at least 1")
        capacity, source = args.capacity_rps, "--capacity-rps"
        if capacity is None:
            capacity, source = capacity_from_tune(), "reports/tune.json (make tune)"
        rec = recommend(usage["cpu"], usage["memory"], usage["rps"], capacity_rps=capacity, capacity_source=source,
                        hpa_metric=args.hpa_metric, rps_metric=args.rps_metric, half_life_s=parse_duration(args.half_life),
                        margin=args.margin, min_floor=args.min_replicas_floor)
    except (UsageError, RecommendError) as err:
        raise UserError(str(err)) from err
    try:
        path = write_outputs(rec, usage["cpu"], usage["memory"], usage["rps"], model=args.model, out_dir=args.out_dir)
    except OSError as err:  # a folder we may not write to: the user's to fix, not a bug
        raise UserError(f"cannot write the recommendation: {err.strerror or err} ({err.filename}); "
                        "pass an --out-dir you can write to") from err
    if args.json:
        sys.stdout.write(json.dumps(rec.as_dict(), indent=2) + "\n")
    for line in rec.reasoning:
        console.print(line)
    for line in rec.warnings:
        console.print(f"[yellow]warning:[/] {line}")
    console.print(
        f"recommend: cpu {rec.cpu_request:.3f}/{rec.cpu_limit:.3f} cores, memory {_mib(rec.memory_request)}/{_mib(rec.memory_limit)}, "
        f"replicas {rec.min_replicas}-{rec.max_replicas}; report {path}, overlay {args.out_dir / 'overlay'}"
    )
    return 0
