"""What `make recommend` leaves behind: the report, the plots beside it, the sizing overlay, and, where the history
has a pattern, a KEDA overlay whose cron triggers raise the replica floor ahead of it.

The sizing overlay keeps the shipped HPA; pre-scaling is a second overlay on top of it, because it needs KEDA in
the cluster (KEDA's cron scaler, https://keda.sh/docs/scalers/cron/). Without KEDA, the report holds the same
windows as scheduled min-replica changes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deployments.sizing.recommend.prescale import (
    DAY_MIN,
    PrescalePlan,
    Window,
    clock,
    shift_weekdays,
    week_floor,
)
from deployments.sizing.recommend.sizing import Recommendation
from deployments.sizing.usage import Usage
from slipway.cluster_names import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from deployments.sizing.recommend.gpu_history import GpuMemory, GpuUtil

PRESCALE_DIR = "prescale"  # beside `overlay` in --out-dir
REACTIVE_TRIGGER = "prometheus"  # the request-rate trigger of deployments/components/autoscaling-keda


def write_outputs(
    rec: Recommendation,
    cpu: Usage,
    memory: Usage,
    rps: Usage,
    *,
    model: str,
    out_dir: Path,
    reports_dir: Path | None = None,
    prescale: PrescalePlan | None = None,
    namespace: str = DEFAULT_NAMESPACE,
    gpu_util: GpuUtil | None = None,
    gpu_memory: GpuMemory | None = None,
) -> Path:
    """reports/recommend.json + .png and a kustomize overlay (build/recommend/overlay) applying it; with `prescale`,
    its section of the report, its plot, and the KEDA overlay (build/recommend/prescale) where it planned windows.

    With a GPU recommendation (`rec.gpu`) the overlay is built on the gpu overlay, not the cpu one: the history came
    from pods with a card each, and its resources keep their whole `nvidia.com/gpu`; the plot gets the GPU panel."""
    from deployments.render.overlay import OVERLAYS_DIR
    from deployments.sizing.recommend.plots import plot_prescale, plot_recommendation
    from slipway import seldon_patch
    from slipway.paths import REPORTS_DIR
    from slipway.reports import write_report

    reports_dir = Path(reports_dir or REPORTS_DIR)
    gpus = rec.gpu.gpus_per_replica if rec.gpu is not None else None
    ops = [
        seldon_patch.resources_op(
            cpu_request=rec.cpu_request,
            cpu_limit=rec.cpu_limit,
            memory_request=rec.memory_request,
            memory_limit=rec.memory_limit,
            gpus=gpus,
        ),
        *seldon_patch.hpa_ops(min_replicas=rec.min_replicas, max_replicas=rec.max_replicas, metrics=rec.hpa["metricsv2"]),
    ]
    comment = "Written by `make recommend` from usage history.\n" + "\n".join(rec.reasoning + rec.warnings)
    base = "gpu" if rec.gpu is not None else "cpu"
    patch, kustomization = seldon_patch.write_overlay(Path(out_dir) / "overlay", ops, base=OVERLAYS_DIR / base, comment=comment)
    plot = reports_dir / "recommend.png"
    plot_recommendation(rec, cpu, memory, rps, plot, gpu_util=gpu_util, gpu_memory=gpu_memory)
    report = {
        **rec.as_dict(),
        "model": model,
        "kustomize_patch": str(patch),
        "kustomization": str(kustomization),
        "overlay_base": base,
        "plot": str(plot),
    }
    if prescale is not None:
        prescale_plot = reports_dir / "recommend-prescale.png"
        plot_prescale(prescale, rps, prescale_plot)
        report["prescale"] = {
            **prescale_section(prescale, model=model, namespace=namespace),
            "plot": str(prescale_plot),
            **write_prescale_overlay(prescale, Path(out_dir)),
        }
    return write_report("recommend", report, reports_dir)


def cron_triggers(plan: PrescalePlan) -> list[dict[str, Any]]:
    """KEDA `cron` triggers, one per window (two where a window starts the evening before: cut at midnight)."""
    return [
        {
            "type": "cron",
            "metadata": {"timezone": plan.settings.timezone, "start": start, "end": end, "desiredReplicas": str(window.replicas)},
        }
        for window in plan.windows
        for start, end in cron_schedules(window)
    ]


def cron_schedules(window: Window) -> list[tuple[str, str]]:
    """(start, end) cron expressions (minute hour day-of-month month day-of-week) for each piece of `window`."""
    schedules = []
    for weekdays, start, end in window.pieces():
        if start == end:
            continue
        ends = (
            f"0 0 * * {cron_weekdays(shift_weekdays(weekdays, 1))}"
            if end == DAY_MIN
            else f"{end % 60} {end // 60} * * {cron_weekdays(weekdays)}"
        )
        schedules.append((f"{start % 60} {start // 60} * * {cron_weekdays(weekdays)}", ends))
    return schedules


def cron_weekdays(weekdays: tuple[int, ...]) -> str:
    """Python's weekdays (Monday 0) as cron's day-of-week field (Sunday 0), with runs as ranges: `1-5`, `0,6`, `*`."""
    if len(set(weekdays)) == 7:
        return "*"
    runs: list[list[int]] = []
    for day in sorted({(day + 1) % 7 for day in weekdays}):
        if runs and day == runs[-1][-1] + 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def prescale_ops(plan: PrescalePlan) -> list[dict[str, Any]]:
    """JSON 6902 operations on the kedaSpec the KEDA component adds: the recommended bounds, the reactive trigger's
    per-replica target, and the cron triggers beside it (a test first, so a changed component fails loudly)."""
    from slipway.seldon_patch import COMPONENT

    keda = f"{COMPONENT}/kedaSpec"
    return [
        {"op": "test", "path": f"{keda}/triggers/0/type", "value": REACTIVE_TRIGGER},
        {"op": "replace", "path": f"{keda}/triggers/0/metadata/threshold", "value": f"{round(plan.target_rps, 1):g}"},
        {"op": "replace", "path": f"{keda}/minReplicaCount", "value": plan.min_replicas},
        {"op": "replace", "path": f"{keda}/maxReplicaCount", "value": plan.max_replicas},
        *({"op": "add", "path": f"{keda}/triggers/-", "value": trigger} for trigger in cron_triggers(plan)),
    ]


def without_keda(plan: PrescalePlan, *, model: str, namespace: str) -> dict[str, Any]:
    """The same windows as scheduled changes of the SeldonDeployment's hpaSpec.minReplicas, for clusters without KEDA: one
    entry per change of the week's floor, so touching windows never set it twice at one time."""
    from slipway.seldon_patch import COMPONENT

    floor = week_floor(plan).ravel()
    changes: dict[tuple[int, int], list[int]] = {}  # (minute of the day, new floor) -> weekdays it changes on
    for moment in np.flatnonzero(floor != np.roll(floor, 1)):
        day, minute = divmod(int(moment), DAY_MIN)
        changes.setdefault((minute, int(floor[moment])), []).append(day)
    schedule = [
        {"cron": f"{minute % 60} {minute // 60} * * {cron_weekdays(tuple(days))}", "min_replicas": replicas}
        for (minute, replicas), days in sorted(changes.items())
    ]
    patch = f'[{{"op":"replace","path":"{COMPONENT}/hpaSpec/minReplicas","value":N}}]'
    return {
        "note": (
            f"without KEDA: at each cron time ({plan.settings.timezone}) set the SeldonDeployment's hpaSpec.minReplicas "
            f"to the number given, e.g. from a CronJob running `kubectl -n {namespace} patch seldondeployment {model} "
            f"--type json -p '{patch}'` (the Seldon operator passes it on to the HPA; patch the SeldonDeployment, not "
            "the HPA, which the operator would set back). The next `make deploy` sets it back to the overlay's"
        ),
        "schedule": schedule,
    }


def prescale_section(plan: PrescalePlan, *, model: str, namespace: str) -> dict[str, Any]:
    """The report's `prescale` key: the pattern, the windows, the triggers and what to do without KEDA."""
    section = plan.as_dict()
    if plan.windows:
        section["keda_triggers"] = cron_triggers(plan)
        section["keda_note"] = (
            f"the KEDA overlay scales reactively on requests/s ({REACTIVE_TRIGGER} trigger, "
            f"{round(plan.target_rps, 1):g} req/s per replica, as AUTOSCALING=keda renders it) and "
            "holds the cron floors beside it; KEDA follows whichever asks for more replicas"
        )
        section["without_keda"] = without_keda(plan, model=model, namespace=namespace)
    return section


def write_prescale_overlay(plan: PrescalePlan, out_dir: Path) -> dict[str, str]:
    """`<out_dir>/prescale`: a kustomization over the sizing overlay that switches to KEDA and adds the cron triggers,
    and `triggers.yaml`, the whole trigger list for a ScaledObject of one's own. Without windows, an earlier run's
    folder is removed, so no stale schedule is left to apply."""
    import yaml

    from deployments.render.autoscaling import component_dir
    from slipway import atomic

    folder = Path(out_dir) / PRESCALE_DIR
    if not plan.windows:
        if (folder / atomic.OUTPUT_MARKER).is_file():
            shutil.rmtree(folder)
        return {}
    ops = prescale_ops(plan)
    windows = ", ".join(f"{w.label} {clock(w.start_min)}-{clock(w.end_min)} -> {w.replicas}" for w in plan.windows)
    header = (
        f"# Written by `make recommend`: pre-scaling ahead of the {plan.pattern} pattern ({plan.settings.timezone}): "
        f"{windows}.\n# The cron triggers raise KEDA's floor; the {REACTIVE_TRIGGER} trigger keeps following the load.\n"
    )
    with atomic.staged_dir(folder) as staging:
        (staging / "patch.yaml").write_text(header + yaml.safe_dump(ops, sort_keys=False))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath((Path(out_dir) / "overlay").resolve(), folder.resolve())],
            "components": [os.path.relpath(component_dir("keda").resolve(), folder.resolve())],
            "patches": [{"path": "patch.yaml", "target": {"kind": "SeldonDeployment"}}],
        }
        (staging / "kustomization.yaml").write_text(
            f"# Render it for a model version: make manifests OVERLAY={folder} (it brings KEDA itself: leave AUTOSCALING "
            "at cpu)\n" + yaml.safe_dump(kustomization, sort_keys=False)
        )
        (staging / "triggers.yaml").write_text(
            "# Not a resource: cron triggers to add to the spec.triggers of a ScaledObject of your own, beside its "
            "reactive trigger (KEDA follows whichever asks for more replicas).\n"
            + yaml.safe_dump(cron_triggers(plan), sort_keys=False)
        )
    return {"keda_overlay": str(folder / "kustomization.yaml"), "triggers_file": str(folder / "triggers.yaml")}
