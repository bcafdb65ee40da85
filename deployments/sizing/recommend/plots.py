"""The PNGs beside reports/recommend.json: usage against the recommendation, and the pre-scaling plan.

A number in a report is easier to trust next to the history it came from: each plot draws the samples the
arithmetic read and the lines it drew from them (requests, limits, what min replicas carry, the planned floor).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deployments.sizing.recommend.prescale import DAY_MIN, PrescalePlan, floor_at, profile_replicas, week_floor
from deployments.sizing.recommend.sizing import TARGET_UTILIZATION, Recommendation, mib
from deployments.sizing.usage import Usage

if TYPE_CHECKING:
    from deployments.sizing.recommend.gpu_history import GpuMemory, GpuUtil
    from deployments.sizing.recommend.gpu_sizing import GpuRecommendation


def plot_recommendation(
    rec: Recommendation,
    cpu: Usage,
    memory: Usage,
    rps: Usage,
    path: Path,
    *,
    gpu_util: GpuUtil | None = None,
    gpu_memory: GpuMemory | None = None,
) -> None:
    """Usage per pod against the recommended requests and limits, and traffic against replica capacity; with GPU
    histories, a fourth panel: each card's utilisation and memory share against the target and the warning line."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()

    gpu = (rec.gpu, gpu_util, gpu_memory) if rec.gpu is not None and gpu_util is not None and gpu_memory is not None else None
    figure, axes = plt.subplots(4 if gpu else 3, 1, figsize=(10, 12 if gpu else 9), sharex=True)
    cpu_axis, memory_axis, rps_axis = axes[:3]
    origin = min(cpu.start, memory.start, rps.start, *([gpu[1].start] if gpu else []))

    def hours(times: np.ndarray) -> np.ndarray:
        return (times - origin) / 3600

    for series in cpu.series:
        cpu_axis.plot(hours(series.times), series.values, lw=0.8, alpha=0.7)
    cpu_axis.axhline(rec.cpu_request, color="tab:green", ls="--", label=f"request {rec.cpu_request:.3f}")
    cpu_axis.axhline(rec.cpu_limit, color="tab:red", ls=":", label=f"limit {rec.cpu_limit:.3f}")
    cpu_axis.set_ylabel("CPU (cores per pod)")
    for series in memory.series:
        memory_axis.plot(hours(series.times), series.values / 2**20, lw=0.8, alpha=0.7)
    memory_axis.axhline(rec.memory_request / 2**20, color="tab:green", ls="--", label=f"request {mib(rec.memory_request)}")
    memory_axis.axhline(rec.memory_limit / 2**20, color="tab:red", ls=":", label=f"limit {mib(rec.memory_limit)}")
    memory_axis.set_ylabel("memory (MiB per pod)")
    times, total = rps.total()
    rps_axis.plot(hours(times), total, color="tab:blue", lw=0.8, label="total requests/s")
    per_replica = rec.capacity_rps * TARGET_UTILIZATION
    rps_axis.axhline(rec.min_replicas * per_replica, color="tab:green", ls="--", label=f"min {rec.min_replicas} replicas")
    rps_axis.axhline(rec.max_replicas * per_replica, color="tab:red", ls=":", label=f"max {rec.max_replicas} replicas")
    rps_axis.set_ylabel("requests/s")
    if gpu:
        _gpu_panel(axes[3], *gpu, hours)
    axes[-1].set_xlabel("hours")
    for axis in axes:
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=8, loc="upper left")
    figure.suptitle("usage against the recommendation")
    save_png(figure, path, dpi=100)


def _gpu_panel(axis, gpu: GpuRecommendation, util: GpuUtil, memory: GpuMemory, hours) -> None:
    """Per card: utilisation (solid) and memory share (dotted) in percent, the target and the memory warning line."""
    colors = {}
    for series in util.series:
        (line,) = axis.plot(hours(series.times), series.values, lw=0.8, alpha=0.8)
        colors[series.pod] = line.get_color()
    for share in memory.shares():
        axis.plot(hours(share.times), 100 * share.values, lw=0.8, ls=":", color=colors.get(share.pod))
    axis.axhline(
        100 * gpu.settings.target_utilization,
        color="tab:green",
        ls="--",
        label=f"target {gpu.settings.target_utilization:.0%} per card ({gpu.min_replicas}-{gpu.max_replicas} cards)",
    )
    axis.axhline(
        100 * gpu.settings.memory_warning,
        color="tab:red",
        ls=":",
        label=f"memory warning {gpu.settings.memory_warning:.0%} (dotted: memory used per card)",
    )
    axis.set_ylim(0, 105)
    axis.set_ylabel("GPU utilisation, memory (%)")


def plot_prescale(plan: PrescalePlan, rps: Usage, path: Path) -> None:
    """Top: the request rate over the history, what min replicas carry, and what the planned floor carries.
    Middle: the pattern per slot of the day (median, p90 and p90 peak), what min replicas carry and what the floor
    carries. Bottom: replicas by time of day for the static peak, the plan and the profile itself (ceil(p90 /
    target)), with their replica-hours per day, and the slots where the plan carries less than the p90 shaded."""
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    figure, (history, daily, replicas) = plt.subplots(3, 1, figsize=(10, 10))
    times, total = rps.total()
    days = (times - times[0]) / 86400
    history.plot(days, total, color="tab:blue", lw=0.7, label="total requests/s")
    history.axhline(plan.min_capacity_rps, color="tab:green", ls="--", label=f"min {plan.min_replicas} replica(s) carry")
    if plan.windows:
        history.step(
            days, floor_at(plan, times) * plan.target_rps, where="post", color="tab:orange", label="planned floor carries"
        )
    history.set_xlabel("days since the first sample")
    history.set_ylabel("requests/s")
    slot_hours = plan.settings.slot_min / 60
    colors = {"every day": "tab:blue", "weekdays": "tab:blue", "weekends": "tab:purple"}
    floor, minutes = week_floor(plan), np.arange(DAY_MIN + 1) / 60
    hours_by_days = {day["days"]: day for day in (plan.replica_hours or {}).get("by_days", [])}
    for profile in plan.profiles:
        hours = np.arange(len(profile.median) + 1) * slot_hours  # each slot drawn to its end, the last one to 24:00
        color = colors.get(profile.label, "tab:blue")

        def steps(values: np.ndarray) -> np.ndarray:
            return np.append(values, values[-1])

        daily.step(hours, steps(profile.median), where="post", color=color, alpha=0.5, label=f"{profile.label}: median")
        daily.step(hours, steps(profile.p90), where="post", color=color, label=f"{profile.label}: p90")
        daily.step(hours, steps(profile.high), where="post", color=color, ls=":", label=f"{profile.label}: p90 peak")
        day_floor = floor[profile.weekdays[0]]
        if plan.windows:
            daily.step(
                minutes,
                steps(day_floor) * plan.target_rps,
                where="post",
                color="tab:orange",
                label=None if profile is not plan.profiles[0] else "planned floor carries",
            )
        spent = hours_by_days.get(profile.label, {})
        replicas.step(
            minutes,
            steps(day_floor),
            where="post",
            color="tab:orange" if color == "tab:blue" else color,
            lw=2,
            label=f"{profile.label}: the plan ({spent.get('plan', 0):g} replica-hours a day)",
        )
        replicas.step(
            hours,
            steps(profile_replicas(profile, plan.target_rps)),
            where="post",
            color=color,
            ls=":",
            label=f"{profile.label}: ceil(p90 / {plan.target_rps:.1f}) ({spent.get('profile', 0):g})",
        )
    if plan.replica_hours:
        replicas.axhline(
            plan.replica_hours["static_peak_replicas"],
            color="tab:red",
            ls="--",
            label=f"static peak {plan.replica_hours['static_peak_replicas']} ({plan.replica_hours['static_peak']:g})",
        )
    for slot in plan.under_p90:
        start, end = (int(part[:2]) * 60 + int(part[3:]) for part in slot["slot"].split("-"))
        replicas.axvspan(
            start / 60,
            end / 60,
            color="tab:red",
            alpha=0.15,
            label=None if slot is not plan.under_p90[0] else "plan under the p90",
        )
    daily.axhline(plan.min_capacity_rps, color="tab:green", ls="--", label=f"min {plan.min_replicas} replica(s) carry")
    for axis in (daily, replicas):
        axis.set_xlim(0, 24)
        axis.set_xticks(range(0, 25, 3))
        axis.set_xlabel(f"hour of day ({plan.settings.timezone})")
    daily.set_ylabel("requests/s")
    replicas.set_ylabel("replicas")
    for axis in (history, daily, replicas):
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7, loc="upper left")
    figure.suptitle(plan.verdict if len(plan.verdict) < 110 else plan.verdict[:107] + "...", fontsize=10)
    save_png(figure, path, dpi=100)
