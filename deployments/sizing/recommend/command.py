"""`python -m deployments recommend`: flags and histories in, the sizing and the pre-scaling plan out.

The histories come from saved query_range files or from Prometheus; everything the user can get wrong (a
missing history, a bad flag, an output folder in the way) is refused with one line before any work.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from deployments.render.autoscaling import REQUEST_COUNTER, RPS_METRIC
from deployments.render.overlay import namespace_argument
from deployments.sizing.recommend.gpu_history import GpuMemory, GpuUtil, check_gpu_histories, fetch_gpu, load_gpu
from deployments.sizing.recommend.gpu_sizing import FLAGS, GpuSettings, recommend_gpu
from deployments.sizing.recommend.sizing import (
    SAFETY_MARGIN,
    TARGET_UTILIZATION,
    RecommendError,
    is_capacity,
    mib,
    recommend,
    with_gpu,
)
from deployments.sizing.usage import Kind, UsageError, fetch_usage, load_usage, parse_duration
from slipway.atomic import check_replaceable, file_in_the_way
from slipway.cli import UserError, console
from slipway.cluster_names import DEFAULT_NAMESPACE
from slipway.paths import BUILD_DIR, REPORTS_DIR
from slipway.reports import read_report

if TYPE_CHECKING:
    from deployments.sizing.recommend.prescale_settings import PrescaleSettings

DEFAULT_QUERIES: dict[Kind, str] = {
    "cpu": 'sum by (pod) (rate(container_cpu_usage_seconds_total{{namespace="{namespace}",container="{model}"}}[5m]))',
    "memory": 'sum by (pod) (container_memory_working_set_bytes{{namespace="{namespace}",container="{model}"}})',
    "rps": "sum by (pod) (rate(" + REQUEST_COUNTER + '{{namespace="{namespace}",model_name="{model}"}}[5m]))',
}
# NVIDIA's DCGM exporter in its Kubernetes mode labels each card with the pod, namespace and container it serves;
# the bare selectors keep each series' card labels and metric name, which the GPU reader checks.
GPU_QUERIES = {
    "gpu-util": 'DCGM_FI_DEV_GPU_UTIL{{namespace="{namespace}",container="{model}"}}',
    "gpu-memory": '{{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE",namespace="{namespace}",container="{model}"}}',
}


def capacity_from_tune(reports_dir: Path | None = None) -> float | None:
    """The per-replica capacity at the SLO that `make tune` measured, if it ran."""

    report = read_report("tune", reports_dir) or {}
    deployment = report.get("deployment") or {}
    capacity = deployment.get("per_replica_capacity_rps") if isinstance(deployment, dict) else deployment
    if capacity is not None and not is_capacity(capacity):  # a hand-edited or foreign report: not a number to size on
        report_path = Path(reports_dir or REPORTS_DIR) / "tune.json"
        raise RecommendError(
            f"{report_path} gives deployment.per_replica_capacity_rps {capacity!r}, not a number of "
            "requests/s above 0: run `make tune` again, or pass --capacity-rps N"
        )
    return capacity


def add_command(commands, find_model: Callable[[str], str]) -> None:
    """Register `python -m deployments recommend`. `find_model(namespace)` names the one model Slipway deployed there,
    for --model's default (handed in by deployments.cli: sizing reaches no cluster itself), or raises UserError."""

    parser = commands.add_parser(
        "recommend",
        help="recommend requests, limits and HPA replicas from usage history",
        description="Recommend CPU/memory requests and limits and HPA replicas from usage history, and KEDA cron "
        "triggers that add replicas ahead of the request rate's daily pattern. Give the three histories as Prometheus "
        "query_range JSON files, or set PROMETHEUS_URL to query them.",
    )
    history = parser.add_argument_group("usage history (files, or PROMETHEUS_URL)")
    history.add_argument("--cpu", type=Path, help="query_range JSON: CPU cores per pod")
    history.add_argument("--memory", type=Path, help="query_range JSON: memory bytes per pod (working set)")
    history.add_argument("--rps", type=Path, help="query_range JSON: requests/s, per pod or in total")
    history.add_argument(
        "--prometheus-url",
        help="default: $PROMETHEUS_URL; credentials from $PROMETHEUS_TOKEN (bearer) "
        "or $PROMETHEUS_USERNAME and $PROMETHEUS_PASSWORD (basic auth)",
    )
    history.add_argument(
        "--namespace",
        type=namespace_argument,
        default=DEFAULT_NAMESPACE,
        help=f"where the model runs (default {DEFAULT_NAMESPACE}, as make deploy)",
    )
    history.add_argument(
        "--model",
        help="the SeldonDeployment / container / model name (default: the one model Slipway deployed in the namespace, "
        "found by its labels on the current kubectl context's cluster)",
    )
    history.add_argument("--range", default="7d", help="how far back to query (e.g. 24h, 7d)")
    history.add_argument("--step", default="5m", help="query resolution")
    for kind, default in DEFAULT_QUERIES.items():
        history.add_argument(f"--{kind}-query", help=f"PromQL for {kind} (default: {default})")
    gpu = parser.add_argument_group("GPU history (NVIDIA DCGM exporter; files, or PROMETHEUS_URL where its series exist)")
    gpu.add_argument("--gpu-util", type=Path, help="query_range JSON: DCGM_FI_DEV_GPU_UTIL (0-100) per GPU")
    gpu.add_argument(
        "--gpu-memory",
        type=Path,
        help="query_range JSON: DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB) per GPU, both in one answer",
    )
    for gpu_kind, default in GPU_QUERIES.items():
        gpu.add_argument(
            f"--{gpu_kind}-query",
            help=f"PromQL for {gpu_kind} (default: {default.format(namespace='NS', model='MODEL')}; "
            "scraped without honor_labels, select on exported_namespace and exported_container)",
        )
    gpu.add_argument("--gpu-target", type=float, default=0.70, help="each replica's GPU this busy at the peak (default 0.7)")
    gpu.add_argument(
        "--gpu-memory-warning",
        type=float,
        default=0.90,
        help="warn where a GPU's used memory reaches this share of the card (default 0.9)",
    )
    knobs = parser.add_argument_group("recommendation")
    knobs.add_argument("--capacity-rps", type=float, help="per-replica capacity at the SLO (default: reports/tune.json)")
    knobs.add_argument("--hpa-metric", choices=["cpu", "rps"], default="cpu", help="what the HPA scales on")
    knobs.add_argument(
        "--rps-metric",
        default=RPS_METRIC,
        help=f"with --hpa-metric rps: the per-pod metric (default {RPS_METRIC}, "
        "the prometheus-adapter rule `make manifests AUTOSCALING=rps` renders)",
    )
    knobs.add_argument("--half-life", default="24h", help="CPU histogram: a sample's weight halves every this long")
    knobs.add_argument("--margin", type=float, default=SAFETY_MARGIN, help="safety margin on top (0.15 = 15%%)")
    knobs.add_argument("--min-replicas-floor", type=int, default=1, help="never recommend fewer replicas (2 for HA)")
    ahead = parser.add_argument_group("pre-scaling from the daily (weekly) pattern of the request rate")
    ahead.add_argument(
        "--prescale-lead",
        default="15m",
        help="raise the replica floor this long before the load rises (whole minutes; default 15m)",
    )
    ahead.add_argument(
        "--prescale-slot",
        default="1h",
        help="scheduling slot: the pattern's resolution and the windows' unit (5m..6h, splitting a day evenly; default 1h)",
    )
    ahead.add_argument(
        "--prescale-timezone",
        default="UTC",
        help="IANA time zone whose hours and weekdays the traffic follows, and the cron triggers' (default UTC)",
    )
    ahead.add_argument("--prescale-min-days", type=int, default=3, help="whole days of history a pattern needs (default 3)")
    parser.add_argument("--json", action="store_true", help="print the recommendation as JSON on stdout")
    parser.add_argument("--out-dir", type=Path, default=BUILD_DIR / "recommend", help="the kustomize overlay goes here")
    parser.set_defaults(func=cmd_recommend, find_model=find_model)


def _check_out_dir(out_dir: Path) -> None:
    """Refuse an --out-dir that cannot hold the overlays (it or a folder above it is a file, or the pre-scaling folder
    holds files this command did not write) before any work."""
    from deployments.sizing.recommend.outputs import PRESCALE_DIR

    overlay = Path(out_dir) / "overlay"
    folder = overlay if overlay.exists() and not overlay.is_dir() else file_in_the_way(overlay)
    if folder is not None:
        raise RecommendError(f"--out-dir {out_dir}: {folder} is a file; name a folder for the overlay (default build/recommend)")
    check_replaceable(Path(out_dir) / PRESCALE_DIR)


def prescale_settings(args) -> PrescaleSettings:
    """The pre-scaling flags as typed settings; a bad one is one line naming its flag."""

    from deployments.sizing.recommend.prescale_settings import FLAGS, PrescaleSettings

    def duration(flag: str, text: str) -> float:
        if text.strip() in ("0", "0s", "0m", "0h"):
            return 0.0
        try:
            return parse_duration(text)
        except UsageError as err:
            raise UsageError(f"{flag}: {err}") from None

    try:
        return PrescaleSettings(
            lead_s=duration("--prescale-lead", args.prescale_lead),
            slot_s=duration("--prescale-slot", args.prescale_slot),
            timezone=args.prescale_timezone,
            min_days=args.prescale_min_days,
        )
    except ValidationError as err:
        raise UsageError(
            "; ".join(
                f"{FLAGS.get(str(issue['loc'][0]), issue['loc'][0])}: {issue['msg'].removeprefix('Value error, ')}"
                for issue in err.errors()
            )
        ) from None


def gpu_settings(args) -> GpuSettings:
    """The GPU flags as typed settings; a bad one is one line naming its flag."""

    try:
        return GpuSettings(target_utilization=args.gpu_target, memory_warning=args.gpu_memory_warning)
    except ValidationError as err:
        raise UsageError(
            "; ".join(
                f"{FLAGS.get(str(issue['loc'][0]), issue['loc'][0])}: "
                f"{issue['msg'].removeprefix('Value error, ')} (got {issue['input']!r})"
                for issue in err.errors()
            )
        ) from None


def gpu_histories(
    args, model: str, url: str | None, window: tuple[float, float, float] | None
) -> tuple[GpuUtil, GpuMemory] | None:
    """The GPU histories: both files, or with Prometheus (`window`: start, end, step) both queries; None where
    there are none (a model on CPUs: its queries match no series)."""

    files = {"gpu-util": args.gpu_util, "gpu-memory": args.gpu_memory}
    if any(files.values()):
        if not all(files.values()):
            missing = next(f"--{kind}" for kind, path in files.items() if not path)
            raise UsageError(
                f"give both GPU histories: {missing} missing (utilisation sizes the replicas, memory says "
                "whether a card can take more batch)"
            )
        return load_gpu(args.gpu_util, "gpu-util"), load_gpu(args.gpu_memory, "gpu-memory")
    if window is None or url is None:
        return None
    start, end, step = window
    queries = {
        kind: getattr(args, f"{kind.replace('-', '_')}_query") or default.format(namespace=args.namespace, model=model)
        for kind, default in GPU_QUERIES.items()
    }
    util = fetch_gpu(url, queries["gpu-util"], kind="gpu-util", start=start, end=end, step_s=step)
    memory = fetch_gpu(url, queries["gpu-memory"], kind="gpu-memory", start=start, end=end, step_s=step)
    if util is None and memory is None:
        return None
    if util is None or memory is None:
        empty = "gpu-util" if util is None else "gpu-memory"
        raise UsageError(
            f"the {empty} query matched no series while the other found GPUs: fix --{empty}-query (it was {queries[empty]})"
        )
    return util, memory


def cmd_recommend(args) -> int:
    """Read the histories, size, plan ahead of the pattern, write; every user mistake is one line (exit 2)."""

    from deployments.sizing.recommend.outputs import write_outputs
    from deployments.sizing.recommend.prescale import plan_prescale

    try:
        _check_out_dir(args.out_dir)
        settings = prescale_settings(args)
        gpu_knobs = gpu_settings(args)
        files: dict[Kind, Path | None] = {"cpu": args.cpu, "memory": args.memory, "rps": args.rps}
        url = args.prometheus_url or os.environ.get("PROMETHEUS_URL")
        window = None
        given = {kind: path for kind, path in files.items() if path is not None}
        usage = {kind: load_usage(path, kind) for kind, path in given.items()} if len(given) == len(files) else {}
        if given and not usage:
            missing = [f"--{kind}" for kind, path in files.items() if not path]
            raise UsageError(f"give all three histories: {', '.join(missing)} missing (or none, with PROMETHEUS_URL set)")
        if not usage and not url:
            raise UsageError(
                "no usage history: give --cpu F --memory F --rps F (Prometheus query_range JSON) or set PROMETHEUS_URL"
            )
        if not 0 <= args.margin <= 2 or args.min_replicas_floor < 1:
            raise UsageError("--margin must be within 0..2 and --min-replicas-floor at least 1")
        model = args.model or args.find_model(args.namespace)  # after the flags' and the histories' checks
        if url and not usage:
            end = time.time()
            start, step = end - parse_duration(args.range), parse_duration(args.step)
            window = (start, end, step)
            for kind, default in DEFAULT_QUERIES.items():
                query = getattr(args, f"{kind}_query") or default.format(namespace=args.namespace, model=model)
                usage[kind] = fetch_usage(url, query, kind=kind, start=start, end=end, step_s=step)
        gpu = gpu_histories(args, model, url, window)
        if gpu is not None:
            check_gpu_histories(*gpu, usage["cpu"].pods)
        capacity, source = args.capacity_rps, "--capacity-rps"
        if capacity is None:
            capacity, source = capacity_from_tune(), "reports/tune.json (make tune)"
        rec = recommend(
            usage["cpu"],
            usage["memory"],
            usage["rps"],
            capacity_rps=capacity,
            capacity_source=source,
            hpa_metric=args.hpa_metric,
            rps_metric=args.rps_metric,
            half_life_s=parse_duration(args.half_life),
            margin=args.margin,
            min_floor=args.min_replicas_floor,
        )
        if gpu is not None:
            rec = with_gpu(rec, recommend_gpu(*gpu, settings=gpu_knobs, margin=args.margin, min_floor=args.min_replicas_floor))
        times, total = usage["rps"].total()
        plan = plan_prescale(
            times,
            total,
            step_s=usage["rps"].step_s,
            min_replicas=rec.min_replicas,
            max_replicas=rec.max_replicas,
            target_rps=rec.capacity_rps * TARGET_UTILIZATION,
            margin=args.margin,
            settings=settings,
        )
    except (UsageError, RecommendError) as err:
        raise UserError(str(err)) from err
    try:
        path = write_outputs(
            rec,
            usage["cpu"],
            usage["memory"],
            usage["rps"],
            model=model,
            out_dir=args.out_dir,
            prescale=plan,
            namespace=args.namespace,
            gpu_util=gpu[0] if gpu else None,
            gpu_memory=gpu[1] if gpu else None,
        )
    except OSError as err:  # a folder we may not write to: the user's to fix, not a bug
        raise UserError(
            f"cannot write the recommendation: {err.strerror or err} ({err.filename}); pass an --out-dir you can write to"
        ) from err
    if args.json:
        sys.stdout.write(json.dumps({**rec.as_dict(), "prescale": plan.as_dict()}, indent=2) + "\n")
    for line in rec.reasoning + plan.reasoning:
        console.print(line)
    for line in rec.warnings:
        console.print(f"[yellow]warning:[/] {line}")
    console.print(
        f"recommend: cpu {rec.cpu_request:.3f}/{rec.cpu_limit:.3f} cores, memory {mib(rec.memory_request)}/{mib(rec.memory_limit)}, "
        f"replicas {rec.min_replicas}-{rec.max_replicas}"
        + (f", {rec.gpu.gpus_per_replica} nvidia.com/gpu each (gpu overlay)" if rec.gpu is not None else "")
        + f"; report {path}, overlay {args.out_dir / 'overlay'}"
    )
    if plan.windows:
        console.print(
            f"pre-scaling: KEDA overlay {args.out_dir / 'prescale'} (make manifests OVERLAY=...); without KEDA "
            "see prescale.without_keda in the report"
        )
    return 0
