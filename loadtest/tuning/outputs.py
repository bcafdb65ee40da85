"""What `make tune` leaves behind: the report with every trial, the Pareto plot, and the best spec
as files a deployment takes as they are (model-settings.json and a kustomize overlay)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployments.render.autoscaling import RPS_METRIC  # the per-pod metric deployments/' prometheus-adapter rule serves
from loadtest.tuning.measure import Measurement, objective_text
from loadtest.tuning.search import SearchResult
from loadtest.tuning.space import SearchSpace, model_settings_for
from slipway import atomic, seldon_patch
from slipway.paths import PROJECT_ROOT, REPORTS_DIR
from slipway.reports import write_report
from slipway.runtime_settings import busy_waiting_settings
from slipway.slo import Slo

HPA_UTILIZATION = 70  # scale out at 70% of the measured capacity: room for the new pod to start
CPU_LIMIT_FACTOR = 2.0  # bursts (warm-up, GC) may use twice the steady need before throttling
MEMORY_REQUEST_FACTOR = 1.25
MEMORY_LIMIT_FACTOR = 2.0
DEFAULT_MEMORY = 512 * 2**20  # when the server's memory could not be read
BASE_DIR = PROJECT_ROOT / "deployments" / "base"  # where the model container's env is defined
OVERLAY_DIR = PROJECT_ROOT / "deployments" / "overlays" / "cpu"  # what the tuned overlay builds on


def pareto_front(measurements: list[Measurement]) -> list[Measurement]:
    """Feasible configs no other beats on both throughput (higher) and p95 (lower)."""
    feasible = [(m, m.p95_ms) for m in measurements if m.feasible and m.p95_ms is not None]
    front = [
        (m, p95)
        for m, p95 in feasible
        if not any(
            o.capacity_rps >= m.capacity_rps and o_p95 <= p95 and (o.capacity_rps > m.capacity_rps or o_p95 < p95)
            for o, o_p95 in feasible
        )
    ]
    return [m for m, _ in sorted(front, key=lambda pair: pair[1])]


def deployment_advice(best: Measurement, *, hpa_metric: str = "cpu", busy_waiting: list[str] | None = None) -> dict[str, Any]:
    """Requests, limits and the HPA target for one replica running the best spec at its capacity. Where the spec's
    settings keep a CPU busy between requests (`busy_waiting`), CPU utilization does not follow the load: the HPA
    then reads requests/s whatever `hpa_metric` asks."""
    memory = best.memory_bytes or DEFAULT_MEMORY
    cores = best.cpu_cores or 1.0
    target_rps = round(best.capacity_rps * HPA_UTILIZATION / 100, 1)
    why = (
        f"one replica served {best.capacity_rps:.0f} req/s within the SLO using {cores:.2f} CPU cores: the CPU "
        f"request is that, so {HPA_UTILIZATION}% CPU utilization means {HPA_UTILIZATION}% of the measured capacity "
        f"({target_rps:g} req/s per replica)"
    )
    if busy_waiting:
        hpa_metric = "rps"
        why += (
            f"; the HPA scales on requests/s, since the model's settings keep a CPU busy between requests "
            f"({'; '.join(busy_waiting)})"
        )
    metric = (
        seldon_patch.pods_metric(RPS_METRIC, target_rps)
        if hpa_metric == "rps"
        else seldon_patch.cpu_utilization_metric(HPA_UTILIZATION)
    )
    return {
        "per_replica_capacity_rps": best.capacity_rps,
        "cpu_request_cores": cores,
        "cpu_limit_cores": cores * CPU_LIMIT_FACTOR,
        "memory_request_bytes": int(memory * MEMORY_REQUEST_FACTOR),
        "memory_limit_bytes": int(memory * MEMORY_LIMIT_FACTOR),
        "hpa_target_rps_per_replica": target_rps,
        "hpa_metric": metric,
        "why": why,
    }


def write_tune_outputs(
    result: SearchResult,
    space: SearchSpace,
    slo: Slo,
    *,
    out_dir: Path,
    name: str = "tune",
    settings: dict[str, Any],
    hpa_metric: str = "cpu",
    reports_dir: Path | None = None,
    notes: list[str] | None = None,
) -> Path:
    """reports/<name>.json + .png, and (when a config held the SLO) build/tune/best and build/tune/overlay.
    `notes`: what the search left out and why (GPU providers this machine lacks, under `--providers auto`)."""
    out_dir = Path(out_dir)
    best = result.best
    front = pareto_front(result.measurements)
    reports_dir = Path(reports_dir or REPORTS_DIR)
    plot_path = reports_dir / f"{name}.png"
    plot_pareto(result.measurements, front, best, plot_path, slo)
    payload: dict[str, Any] = {
        "objective": objective_text(space.providers != ["cpu"]),
        "slo": slo.model_dump(exclude_none=True),
        "space": {**space.model_dump(mode="json"), "grid_size": len(space.grid())},
        "settings": settings,
        "stopped": result.stopped,
        "suggestions": result.suggestions,
        "trials": [{"trial": index, **m.as_dict()} for index, m in enumerate(result.measurements)],
        "pareto": [m.config.key for m in front],
        "best": best.as_dict() if best else None,
        "plot": str(plot_path),
    }
    if notes:
        payload["notes"] = list(notes)
    if best is not None:
        best_dir = out_dir / "best"
        base_settings = json.loads((Path(space.variants[best.config.variant]) / "model-settings.json").read_text())
        best_settings = model_settings_for(best.config, base_settings)
        advice = deployment_advice(best, hpa_metric=hpa_metric, busy_waiting=busy_waiting_settings(best_settings))
        atomic.write_json(best_dir / "model-settings.json", best_settings)
        patch, kustomization = write_patch(
            best, advice, out_dir=out_dir / "overlay", settings_path=best_dir / "model-settings.json"
        )
        payload["deployment"] = {
            **advice,
            "model_settings": str(best_dir / "model-settings.json"),
            "variant_dir": str(space.variants[best.config.variant]),
            "parallel_workers": best.config.parallel_workers,
            "kustomize_patch": str(patch),
            "kustomization": str(kustomization),
        }
    return write_report(name, payload, reports_dir)


def write_patch(best: Measurement, advice: dict[str, Any], *, out_dir: Path, settings_path: Path) -> tuple[Path, Path]:
    ops = [
        seldon_patch.resources_op(
            cpu_request=advice["cpu_request_cores"],
            cpu_limit=advice["cpu_limit_cores"],
            memory_request=advice["memory_request_bytes"],
            memory_limit=advice["memory_limit_bytes"],
        ),
        *seldon_patch.env_op(
            seldon_patch.base_container_env(BASE_DIR), "MLSERVER_PARALLEL_WORKERS", str(best.config.parallel_workers)
        ),
        *seldon_patch.hpa_ops(metrics=[advice["hpa_metric"]]),
    ]
    memory_note = (
        ""
        if advice["hpa_metric"].get("type") != "ContainerResource"
        else f"The HPA reads the model container's CPU alone, without the cpu overlay's memory target: the memory "
        f"request is {MEMORY_REQUEST_FACTOR:g}x the use measured at capacity, which thus sits at "
        f"{100 / MEMORY_REQUEST_FACTOR:.0f}% of it;\na memory target there would hold up "
        "replicas the CPU no longer asks for (the HPA follows whichever metric asks for more).\n"
    )
    comment = (
        f"Written by `make tune`: the best serving spec found ({best.config.key}).\n"
        f"{advice['why']}.\n{memory_note}"
        f"Serve the variant with {settings_path} as its model-settings.json (re-publish it: the manifest hashes it)."
    )
    return seldon_patch.write_overlay(out_dir, ops, base=OVERLAY_DIR, comment=comment)


def plot_pareto(
    measurements: list[Measurement], front: list[Measurement], best: Measurement | None, path: Path, slo: Slo
) -> None:
    """Throughput against p95 for every trial: the Pareto front joined, the best per core starred."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    figure, axis = plt.subplots(figsize=(8, 5))
    feasible = [m for m in measurements if m.feasible and m.p95_ms is not None]
    infeasible = [m for m in measurements if not m.feasible and m.steps]
    axis.scatter([m.p95_ms for m in feasible], [m.capacity_rps for m in feasible], c="tab:blue", label="trial (within SLO)")
    if infeasible:
        lightest = [next((s for s in m.steps if s.get("requests")), None) for m in infeasible]
        points = [(s["p95_ms"], s["rps"]) for s in lightest if s and s.get("p95_ms") is not None]
        if points:
            axis.scatter(*zip(*points), marker="x", c="tab:gray", label="infeasible (lightest step)")
    if front:
        axis.plot(
            [m.p95_ms for m in front],
            [m.capacity_rps for m in front],
            "D--",
            c="tab:orange",
            mfc="none",
            markersize=11,
            label="Pareto front",
        )
    for m in feasible:
        axis.annotate(m.config.key, (m.p95_ms, m.capacity_rps), fontsize=6, xytext=(4, 4), textcoords="offset points")
    if best is not None:
        axis.scatter(
            [best.p95_ms],
            [best.capacity_rps],
            marker="*",
            s=250,
            c="tab:red",
            zorder=5,
            label=f"best per core: {best.config.key} ({best.objective:.0f} req/s/core)",
        )
    from loadtest.plot import limit_label

    for limit, style in (("p95_ms", "-"), ("p99_ms", ":")):
        if getattr(slo, limit):
            axis.axvline(
                getattr(slo, limit), color="tab:red", linestyle=style, alpha=0.5, label=limit_label(limit, getattr(slo, limit))
            )
    if slo.min_rps is not None:
        axis.axhline(slo.min_rps, color="tab:blue", linestyle="--", alpha=0.5, label=limit_label("min_rps", slo.min_rps))
    axis.set_xlabel("p95 latency at capacity (ms)")
    axis.set_ylabel("throughput at capacity (req/s)")
    axis.set_title("serving specs: throughput against p95")
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8, loc="lower right")
    save_png(figure, path, dpi=110)
