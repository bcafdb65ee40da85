"""The load test's picture: what a person checks first is whether the SLO held, and at what load.

So every limit the SLO sets is drawn as its own labelled line on the axis it limits (p95 and p99 on latency,
min_rps on throughput), every series and line is in a legend, and the load itself is drawn over time (users as a
staircase), so a step load reads as steps and a constant load as one level. The figure is built by `draw_load`
(tests read its artists) and written by `plot_load`.
"""

from __future__ import annotations

from pathlib import Path

from loadtest.steps import StepFigures
from slipway.slo import Slo

# One colour per quantity, the same in every panel: a limit is drawn in its quantity's colour, dashed.
COLOURS = {"rps": "tab:blue", "p95_ms": "tab:red", "p99_ms": "tab:purple", "users": "tab:gray"}
LIMIT_STYLE = {"linestyle": (0, (6, 3)), "linewidth": 1.2, "alpha": 0.9}


def limit_label(limit: str, value: float) -> str:
    """The legend's words for one SLO line, e.g. `SLO p95 <= 50 ms`."""
    if limit == "min_rps":
        return f"SLO min_rps >= {value:g} req/s"
    return f"SLO {limit.removesuffix('_ms')} <= {value:g} ms"


def _latency_limits(axis, slo: Slo | None) -> None:
    for limit in ("p95_ms", "p99_ms"):
        value = getattr(slo, limit, None) if slo is not None else None
        if value is not None:
            axis.axhline(value, color=COLOURS[limit], label=limit_label(limit, value), **LIMIT_STYLE)


def _throughput_limit(axis, slo: Slo | None) -> None:
    if slo is not None and slo.min_rps is not None:
        axis.axhline(slo.min_rps, color=COLOURS["rps"], label=limit_label("min_rps", slo.min_rps), **LIMIT_STYLE)


def _legend(*axes, loc: str = "upper left") -> None:
    """One legend for axes that share a panel (twinx), on the first, above the others' lines."""
    handles, labels = [], []
    for axis in axes:
        more_handles, more_labels = axis.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    legend = axes[0].legend(handles, labels, loc=loc, fontsize=7, framealpha=0.85)
    legend.set_zorder(10)
    axes[0].set_zorder(axes[-1].get_zorder() + 1)  # the legend over the twin's lines
    axes[0].patch.set_visible(False)


def _latency_top(steps: list[StepFigures], slo: Slo | None) -> float:
    """Room above the highest latency or limit, so a limit above every measurement is still on the plot."""
    values = [value for step in steps for value in (step.p95_ms, step.p99_ms) if value is not None]
    values += [value for value in (getattr(slo, "p95_ms", None), getattr(slo, "p99_ms", None)) if value is not None]
    return max(values, default=1.0) * 1.15


def draw_load(steps: list[StepFigures], *, title: str, slo: Slo | None = None, saturation: dict | None = None):
    """The figure: throughput and latency against users; the load over time; latency over time. Not saved."""
    from slipway.plots import pyplot

    plt = pyplot()
    steps = [step for step in steps if step.requests]
    figure, (by_load, load_over_time, latency_over_time) = plt.subplots(1, 3, figsize=(16, 4.8))
    figure.suptitle(title)
    users = [step.users for step in steps]
    rps = [step.rps for step in steps]
    top = _latency_top(steps, slo)

    by_load.plot(users, rps, "o-", color=COLOURS["rps"], label="throughput (req/s)")
    _throughput_limit(by_load, slo)
    by_load.set_xlabel("concurrent users")
    by_load.set_ylabel("requests/s", color=COLOURS["rps"])
    if len(set(users)) > 2 and max(users) / max(min(users), 1) >= 8:
        by_load.set_xscale("log", base=2)
        by_load.set_xticks(sorted(set(users)), labels=[str(count) for count in sorted(set(users))])  # 8, not 2^3
    latency = by_load.twinx()
    for name in ("p95_ms", "p99_ms"):
        latency.plot(
            users,
            [getattr(step, name) for step in steps],
            "s--" if name == "p95_ms" else "^:",
            color=COLOURS[name],
            label=f"{name.removesuffix('_ms')} latency (ms)",
        )
    _latency_limits(latency, slo)
    latency.set_ylabel("latency (ms)")
    latency.set_ylim(0, top)
    by_load.set_ylim(bottom=0, top=max([*rps, slo.min_rps if slo and slo.min_rps else 0, 1]) * 1.15)
    if saturation and saturation.get("saturated"):
        by_load.axvline(
            saturation["users"],
            color=COLOURS["users"],
            linestyle=":",
            label=f"saturation: {saturation['users']} users, {saturation['rps']:.0f} req/s",
        )
    by_load.set_title("throughput and latency against load")
    _legend(by_load, latency)

    # The load as it was applied: each step's users held from its start to its end.
    edges = [step.started_s for step in steps] + ([steps[-1].started_s + steps[-1].duration_s] if steps else [])
    if steps:  # a run that completed no step (a server that never answered) has no load to draw
        load_over_time.stairs(users, edges, color=COLOURS["users"], linewidth=2, label="users (the load applied)", baseline=None)
    load_over_time.set_xlabel("seconds into the run")
    load_over_time.set_ylabel("concurrent users", color=COLOURS["users"])
    load_over_time.set_ylim(0, max(users, default=1) * 1.2)
    served = load_over_time.twinx()
    middles = [step.started_s + step.duration_s / 2 for step in steps]
    served.plot(middles, rps, "o-", color=COLOURS["rps"], label="throughput (req/s)")
    _throughput_limit(served, slo)
    served.set_ylabel("requests/s", color=COLOURS["rps"])
    served.set_ylim(0, max([*rps, slo.min_rps if slo and slo.min_rps else 0, 1]) * 1.15)
    load_over_time.set_title(f"the load over time ({len(steps)} step{'s' if len(steps) != 1 else ''})")
    _legend(load_over_time, served)

    for name in ("p95_ms", "p99_ms"):
        latency_over_time.plot(
            middles,
            [getattr(step, name) for step in steps],
            "s--" if name == "p95_ms" else "^:",
            color=COLOURS[name],
            label=f"{name.removesuffix('_ms')} latency (ms)",
        )
    _latency_limits(latency_over_time, slo)
    latency_over_time.set_xlabel("seconds into the run")
    latency_over_time.set_ylabel("latency (ms)")
    latency_over_time.set_ylim(0, top)
    latency_over_time.set_xlim(load_over_time.get_xlim())  # the same time axis as the load beside it
    latency_over_time.set_title("latency over time" + ("" if slo is None or slo.is_empty() else " against the SLO"))
    _legend(latency_over_time)
    return figure


def plot_load(
    steps: list[StepFigures], path: Path, *, title: str, slo: Slo | None = None, saturation: dict | None = None
) -> None:
    """Draw the load test's figure and write it as a PNG."""
    from slipway.plots import save_png

    save_png(draw_load(steps, title=title, slo=slo, saturation=saturation), path, dpi=110)
