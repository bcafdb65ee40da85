"""The load test's report: `reports/<name>.json` with every step, and a PNG a person can read at a glance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.run import LoadRun
from loadtest.slo import Verdict
from slipway.paths import REPORTS_DIR
from slipway.reports import write_report


def write_loadtest_report(
    run: LoadRun, *, name: str, context: dict[str, Any], verdict: Verdict | None, reports_dir: Path | None = None
) -> Path:
    """Write the JSON report and its plot beside it; returns the JSON's path."""
    reports_dir = Path(reports_dir or REPORTS_DIR)
    plot = reports_dir / f"{name}.png"
    plot_throughput_latency(run, plot, title=f"{context.get('model', '')} ({context.get('protocol', '')}, {context.get('shape', {}).get('kind', '')} load)")
    payload = {
        **context,
        "result": run.aggregate.as_dict(),
        "steps": [step.as_dict() for step in run.steps],
        "saturation": run.saturation,
        "stopped": run.stopped,
        "findings": shape_findings(context.get("shape", {}).get("kind", ""), run),
        "slo": verdict.as_dict() if verdict else None,
        "plot": str(plot),
        **run.files,
    }
    return write_report(name, payload, reports_dir)


def shape_findings(kind: str, run: LoadRun) -> dict[str, Any]:
    """What each shape is run to find out: saturation (step), recovery (spike), drift (soak)."""
    steps = [step for step in run.steps if step.requests]
    if kind == "step":
        return {"saturation": run.saturation}
    if kind == "spike" and len(steps) == 3:
        base, spike, after = steps
        return {
            "p95_ms": {"baseline": base.p95_ms, "spike": spike.p95_ms, "recovery": after.p95_ms},
            "rps": {"baseline": base.rps, "spike": spike.rps, "recovery": after.rps},
            "recovery_p95_vs_baseline": _ratio(after.p95_ms, base.p95_ms),
        }
    if kind == "soak" and len(steps) >= 2:
        first, last = steps[0], steps[-1]
        return {
            "windows": len(steps),
            "p95_drift": _ratio(last.p95_ms, first.p95_ms),
            "rps_drift": _ratio(last.rps, first.rps),
            "p95_ms_range": [min(s.p95_ms for s in steps), max(s.p95_ms for s in steps)],
        }
    return {}


def _ratio(new: float | None, old: float | None) -> float | None:
    return round(new / old, 3) if new is not None and old else None


def plot_throughput_latency(run: LoadRun, path: Path, *, title: str) -> None:
    """Throughput and p95 against load (users), and the same over time; the saturation point marked."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    steps = [step for step in run.steps if step.requests]
    figure, (by_load, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    figure.suptitle(title)
    users = [step.users for step in steps]
    rps = [step.rps for step in steps]
    p95 = [step.p95_ms for step in steps]

    by_load.plot(users, rps, "o-", color="tab:blue", label="throughput")
    by_load.set_xlabel("concurrent users")
    by_load.set_ylabel("requests/s", color="tab:blue")
    if len(set(users)) > 2 and max(users) / max(min(users), 1) >= 8:
        by_load.set_xscale("log", base=2)
    latency = by_load.twinx()
    latency.plot(users, p95, "s--", color="tab:red", label="p95")
    latency.set_ylabel("p95 latency (ms)", color="tab:red")
    saturation = run.saturation or {}
    if saturation.get("saturated"):
        by_load.axvline(saturation["users"], color="gray", linestyle=":")
        by_load.annotate(
            f"saturation: {saturation['users']} users, {saturation['rps']:.0f} req/s",
            (saturation["users"], saturation["rps"]), textcoords="offset points", xytext=(5, -15), fontsize=8,
        )
    by_load.set_title("throughput and p95 against load")
    for axis in (by_load, latency):
        axis.set_ylim(bottom=0)

    middles = [step.started_s + step.duration_s / 2 for step in steps]
    by_time.plot(middles, rps, "o-", color="tab:blue")
    by_time.set_xlabel("seconds into the run")
    by_time.set_ylabel("requests/s", color="tab:blue")
    over_time = by_time.twinx()
    over_time.plot(middles, p95, "s--", color="tab:red")
    over_time.set_ylabel("p95 latency (ms)", color="tab:red")
    for step in steps:
        by_time.axvspan(step.started_s, step.started_s + step.duration_s, alpha=0.06, color="gray")
        by_time.annotate(f"{step.users}u", (step.started_s, 0), fontsize=7, color="gray",
                         xycoords=("data", "axes fraction"), xytext=(2, 2), textcoords="offset points")
    by_time.set_title("each step over time (users shaded)")
    for axis in (by_time, over_time):
        axis.set_ylim(bottom=0)
    save_png(figure, path, dpi=110)
