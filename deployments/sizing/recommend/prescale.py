"""Pre-scaling from history: a replica floor in steps that follows the request rate's pattern (see `pattern`), each
step raised a lead time ahead.

A reactive autoscaler adds replicas after the load has arrived and a new pod takes time to start, so a
surge that comes every morning is served short-handed every morning. Each slot of the day gets the replicas its
high days need (the p90 of the slot's request rate plus the margin, at the target per replica, within min..max replicas);
adjacent slots that need as many are one window, and a window that rises above the slot before it starts `lead`
early. One window at the day's peak replicas would hold the peak all day long; the steps follow the curve, and the
plan says what it costs in replica-hours per day beside a static peak and the profile itself. Without a pattern
there is no window and the plan says why. Pure functions on (timestamps, requests/s): no files, no clock.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from deployments.sizing.recommend.pattern import Pattern, Profile, find_pattern
from deployments.sizing.recommend.prescale_settings import PrescaleSettings

DAY_MIN = 1440


@dataclass(frozen=True)
class Window:
    """One step of the replica floor on some weekdays: adjacent slots that need the same replicas (more than min), from
    `peak_start_min` to `end_min` (minutes after local midnight; an end before the start runs past midnight), raised
    `lead_min` ahead where it rises above the slot before it (0 where it steps down from a higher one)."""

    label: str
    weekdays: tuple[int, ...]
    peak_start_min: int
    end_min: int
    lead_min: int
    replicas: int
    typical_rps: float
    high_rps: float
    days_above: int
    days_seen: int

    @property
    def start_min(self) -> int:
        """When the floor rises: negative where the lead reaches into the day before."""
        return self.peak_start_min - self.lead_min

    def pieces(self) -> list[tuple[tuple[int, ...], int, int]]:
        """(weekdays, start, end) within single days, cut at midnight so each cron schedule keeps its weekdays: slots past
        midnight were measured on the window's own days, a lead before midnight falls on the days before."""
        if self.peak_start_min < self.end_min and self.start_min >= 0:
            return [(self.weekdays, self.start_min, self.end_min)]
        if self.peak_start_min < self.end_min:
            return [(shift_weekdays(self.weekdays, -1), self.start_min + DAY_MIN, DAY_MIN), (self.weekdays, 0, self.end_min)]
        return [(self.weekdays, self.start_min, DAY_MIN), (self.weekdays, 0, self.end_min)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.label,
            "start": clock(self.start_min),
            "peak_start": clock(self.peak_start_min),
            "end": clock(self.end_min),
            "replicas": self.replicas,
            "typical_rps": round(self.typical_rps, 2),
            "p90_rps": round(self.high_rps, 2),
            "days_above_min_capacity": f"{self.days_above} of {self.days_seen}",
        }


@dataclass
class PrescalePlan:
    """The pattern found (or why none), the windows planned ahead of it, and the arithmetic behind them."""

    pattern: Pattern
    verdict: str
    settings: PrescaleSettings
    min_replicas: int
    max_replicas: int
    target_rps: float  # requests/s one replica is meant to carry (capacity x target utilization)
    profiles: list[Profile] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    replica_hours: dict[str, Any] | None = None  # per day: static peak, the plan, the p90 profile (see `replica_hours`)
    under_p90: list[dict[str, Any]] = field(default_factory=list)  # slots whose floor carries less than their p90

    @property
    def min_capacity_rps(self) -> float:
        return self.min_replicas * self.target_rps

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "verdict": self.verdict,
            "timezone": self.settings.timezone,
            "lead_minutes": self.settings.lead_min,
            "slot_minutes": self.settings.slot_min,
            "min_replicas": self.min_replicas,
            "max_replicas": self.max_replicas,
            "target_rps_per_replica": round(self.target_rps, 2),
            "min_capacity_rps": round(self.min_capacity_rps, 2),
            "statistics": self.statistics,
            "profiles": [profile.as_dict() for profile in self.profiles],
            "windows": [window.as_dict() for window in self.windows],
            "replica_hours_per_day": self.replica_hours,
            "slots_under_p90": self.under_p90,
            "reasoning": self.reasoning,
        }


def plan_prescale(
    times: np.ndarray,
    rps: np.ndarray,
    *,
    step_s: float,
    min_replicas: int,
    max_replicas: int,
    target_rps: float,
    margin: float,
    settings: PrescaleSettings | None = None,
) -> PrescalePlan:
    """Find the request rate's daily or weekly pattern and plan a stepped replica floor ahead of it (see the module)."""
    settings = settings or PrescaleSettings()
    plan = PrescalePlan(
        pattern="none", verdict="", settings=settings, min_replicas=min_replicas, max_replicas=max_replicas, target_rps=target_rps
    )
    found = find_pattern(times, rps, step_s=step_s, settings=settings)
    plan.pattern, plan.reasoning, plan.statistics, plan.profiles = (
        found.pattern,
        found.reasoning,
        found.statistics,
        found.profiles,
    )
    if found.pattern == "none":
        plan.verdict = found.verdict
        return plan
    for profile in plan.profiles:
        plan.windows.extend(_steps(profile, plan, margin))
    plan.replica_hours, plan.under_p90 = replica_hours(plan), under_p90(plan)
    if plan.windows:
        levels = sorted({window.replicas for window in plan.windows})
        plan.verdict = (
            f"{plan.pattern} pattern: a replica floor in {len(plan.windows)} step(s) of "
            f"{', '.join(map(str, levels))} replicas where the p90 load passes the "
            f"{plan.min_capacity_rps:.1f} req/s that {min_replicas} replica(s) carry"
        )
    else:
        peak = max(float(np.nanmax(profile.p90)) for profile in plan.profiles)
        if peak * (1 + margin) <= plan.min_capacity_rps + 1e-9:
            plan.verdict = (
                f"{plan.pattern} pattern, but its p90 ({peak:.1f} req/s, plus the margin) stays within the "
                f"{plan.min_capacity_rps:.1f} req/s that min replicas carry: nothing to schedule"
            )
        else:
            plan.verdict = (
                f"{plan.pattern} pattern, but its p90 needs the same replicas all day: nothing to schedule "
                "(raise --min-replicas-floor instead)"
            )
    plan.reasoning.append(plan.verdict)
    hours = plan.replica_hours
    if hours is not None:
        plan.reasoning.append(
            f"replica-hours per day: {hours['plan']:g} for the plan, {hours['static_peak']:g} for a static "
            f"{hours['static_peak_replicas']} replica(s) all day (the highest p90 at {plan.target_rps:.1f} req/s per "
            f"replica), {hours['profile']:g} for the p90 profile itself (ceil(p90 / {plan.target_rps:.1f}) per slot)"
        )
    if plan.under_p90:
        plan.reasoning.append(
            f"the plan carries less than the p90 in {len(plan.under_p90)} slot(s): "
            + "; ".join(f"{slot['days']} {slot['slot']} ({slot['why']})" for slot in plan.under_p90)
        )
    return plan


def slot_replicas(profile: Profile, plan: PrescalePlan, margin: float) -> np.ndarray:
    """The replicas each slot of `profile` needs: its p90 request rate plus the margin at the target per replica, within
    the plan's min..max (a slot no day observed needs min)."""
    high = np.nan_to_num(profile.p90, nan=0.0)
    need = np.ceil(high * (1 + margin) / plan.target_rps - 1e-9).astype(int)
    return np.clip(need, plan.min_replicas, plan.max_replicas)


def profile_replicas(profile: Profile, target_rps: float) -> np.ndarray:
    """The profile itself in replicas: ceil(p90 / target) per slot, no margin, at least one."""
    high = np.nan_to_num(profile.p90, nan=0.0)
    return np.maximum(1, np.ceil(high / target_rps - 1e-9).astype(int))


def _steps(profile: Profile, plan: PrescalePlan, margin: float) -> list[Window]:
    """Runs of adjacent slots that need the same replicas, above min (around midnight too), each a window raised
    the lead ahead where it rises from the slot before."""
    settings, slots = plan.settings, len(profile.p90)
    levels = slot_replicas(profile, plan, margin)
    if (levels == plan.min_replicas).all():
        return []
    if (levels == levels[0]).all():
        plan.reasoning.append(
            f"{profile.label}: the p90 load needs {levels[0]} replicas all day: raise the min replicas "
            f"(--min-replicas-floor {levels[0]}) rather than schedule them"
        )
        return []
    if levels.min() > plan.min_replicas:
        plan.reasoning.append(
            f"{profile.label}: the p90 load never needs fewer than {levels.min()} replicas: "
            f"--min-replicas-floor {levels.min()} would hold that without a schedule"
        )
    start = int(np.flatnonzero(levels != np.roll(levels, 1))[0])  # a step begins here: no run is cut at midnight
    runs = []  # (first slot, length), a run may wrap past the last slot
    index = 0
    while index < slots:
        slot = (start + index) % slots
        length = 1
        while length < slots - index and levels[(slot + length) % slots] == levels[slot]:
            length += 1
        runs.append((slot, length))
        index += length
    windows = []
    for first, length in runs:
        replicas = int(levels[first])
        if replicas == plan.min_replicas:
            continue
        lead = settings.lead_min if levels[(first - 1) % slots] < replicas else 0
        if length * settings.slot_min + lead >= DAY_MIN:
            plan.reasoning.append(
                f"{profile.label}: with its {lead}-min lead the {replicas}-replica floor would last all "
                "day: raise the min replicas (--min-replicas-floor) rather than schedule them"
            )
            continue
        covered = [(first + offset) % slots for offset in range(length)]
        high = float(np.nanmax(profile.p90[covered]))
        typical = float(np.nanmax(profile.median[covered]))
        day_levels = profile.levels[:, covered]
        seen = np.isfinite(day_levels).any(axis=1)
        above = (np.nan_to_num(day_levels, nan=0.0) > plan.min_capacity_rps).any(axis=1)
        peak_start = first * settings.slot_min
        end = peak_start + length * settings.slot_min
        end -= DAY_MIN if end > DAY_MIN else 0  # past midnight: the end comes before the start
        window = Window(
            label=profile.label,
            weekdays=profile.weekdays,
            peak_start_min=peak_start,
            end_min=end,
            lead_min=lead,
            replicas=replicas,
            typical_rps=typical,
            high_rps=high,
            days_above=int((above & seen).sum()),
            days_seen=int(seen.sum()),
        )
        windows.append(window)
        need = math.ceil(high * (1 + margin) / plan.target_rps - 1e-9)
        plan.reasoning.append(
            f"{profile.label} {clock(peak_start)}-{clock(end)} {settings.timezone}: p90 {high:.1f} req/s (typically "
            f"{typical:.1f}) -> ceil({high:.1f} x {1 + margin:.2f} / {plan.target_rps:.1f}) = {need} replicas"
            f"{f' (capped at max {plan.max_replicas})' if need > plan.max_replicas else ''}"
            + (f" from {clock(window.start_min)} ({lead} min ahead)" if lead else " (down from the step before)")
        )
    return windows


def replica_hours(plan: PrescalePlan) -> dict[str, Any] | None:
    """Replica-hours per day (per kind of day, and a week's average day): (a) a static floor at the replicas of the
    highest p90 all day, (b) the plan's floor (minute by minute, leads included, never below min replicas), (c)
    the profile itself, ceil(p90 / target) per slot. None without a pattern."""
    if not plan.profiles:
        return None
    floor, slot_h = week_floor(plan), plan.settings.slot_min / 60
    static = max(plan.min_replicas, *(int(profile_replicas(profile, plan.target_rps).max()) for profile in plan.profiles))
    days: list[dict[str, Any]] = []
    for profile in plan.profiles:
        days.append(
            {
                "days": profile.label,
                "static_peak": round(static * 24.0, 2),
                "plan": round(float(floor[list(profile.weekdays)].sum(axis=1).mean()) / 60, 2),
                "profile": round(float(profile_replicas(profile, plan.target_rps).sum()) * slot_h, 2),
            }
        )
    weights = [len(profile.weekdays) / 7 for profile in plan.profiles]  # a week's average day
    return {
        "static_peak_replicas": static,
        **{
            key: round(sum(weight * day[key] for weight, day in zip(weights, days)), 2)
            for key in ("static_peak", "plan", "profile")
        },
        "by_days": days,
    }


def under_p90(plan: PrescalePlan) -> list[dict[str, Any]]:
    """The slots whose lowest floor (on the profile's weekdays) carries less than the slot's p90 request rate."""
    floor, slot_min, short = week_floor(plan), plan.settings.slot_min, []
    for profile in plan.profiles:
        for slot, high in enumerate(profile.p90):
            if not np.isfinite(high):
                continue
            replicas = int(floor[list(profile.weekdays), slot * slot_min : (slot + 1) * slot_min].min())
            if replicas * plan.target_rps < high - 1e-9:
                why = (
                    f"capped at max {plan.max_replicas} replicas"
                    if replicas >= plan.max_replicas
                    else f"{replicas} replica(s) scheduled"
                )
                short.append(
                    {
                        "days": profile.label,
                        "slot": f"{clock(slot * slot_min)}-{clock((slot + 1) * slot_min)}",
                        "p90_rps": round(float(high), 2),
                        "replicas": replicas,
                        "carries_rps": round(replicas * plan.target_rps, 2),
                        "why": why,
                    }
                )
    return short


def week_floor(plan: PrescalePlan) -> np.ndarray:
    """The replica floor the plan keeps in each minute of the week, [weekday (Monday 0), minute after midnight]."""
    floor = np.full((7, DAY_MIN), plan.min_replicas, dtype=int)
    for window in plan.windows:
        for weekdays, start, end in window.pieces():
            for day in weekdays:
                floor[day, start:end] = np.maximum(floor[day, start:end], window.replicas)
    return floor


def floor_at(plan: PrescalePlan, times: np.ndarray) -> np.ndarray:
    """The replica floor the plan keeps at each timestamp (local time in the plan's zone)."""
    zone, floor = ZoneInfo(plan.settings.timezone), week_floor(plan)
    moments = [dt.datetime.fromtimestamp(float(stamp), zone) for stamp in times]
    return np.array([floor[moment.weekday(), moment.hour * 60 + moment.minute] for moment in moments], dtype=int)


def shift_weekdays(weekdays: tuple[int, ...], days: int) -> tuple[int, ...]:
    return tuple(sorted((day + days) % 7 for day in weekdays))


def clock(minutes: int) -> str:
    """Minutes after local midnight as HH:MM (a negative count is the evening before)."""
    minutes += DAY_MIN if minutes < 0 else 0
    return f"{minutes // 60:02d}:{minutes % 60:02d}"
