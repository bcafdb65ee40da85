"""The load test's report: `reports/<name>.json` with every step, and a PNG a person can read at a glance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.plot import plot_load
from loadtest.run import LoadRun
from slipway.paths import REPORTS_DIR
from slipway.reports import write_report
from slipway.slo import Verdict


def write_loadtest_report(
    run: LoadRun, *, name: str, context: dict[str, Any], verdict: Verdict | None, reports_dir: Path | None = None
) -> Path:
    """Write the JSON report and its plot beside it; returns the JSON's path."""
    reports_dir = Path(reports_dir or REPORTS_DIR)
    plot = reports_dir / f"{name}.png"
    plot_load(
        run.steps,
        plot,
        title=f"{context.get('model', '')} ({context.get('protocol', '')}, {context.get('shape', {}).get('kind', '')} load)",
        slo=verdict.slo if verdict else None,
        saturation=run.saturation,
    )
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
        p95s = [step.p95_ms for step in steps if step.p95_ms is not None]  # a window whose histogram counted nothing has none
        return {
            "windows": len(steps),
            "p95_drift": _ratio(last.p95_ms, first.p95_ms),
            "rps_drift": _ratio(last.rps, first.rps),
            "p95_ms_range": [min(p95s), max(p95s)] if p95s else None,
        }
    return {}


def _ratio(new: float | None, old: float | None) -> float | None:
    return round(new / old, 3) if new is not None and old else None
