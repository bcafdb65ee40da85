"""Pre-scaling from history: windows where the request rate's pattern (see `pattern`) rises past what min replicas
carry, planned as replica floors that start a lead time ahead.

A reactive autoscaler adds replicas after the load has arrived and a new pod takes time to start, so a
surge that comes every morning is served short-handed every morning. Each window is whole scheduling
slots, sized for its high days (p90 peak plus the margin), raised `lead` early; without a pattern there
is no window and the plan says why. Pure functions on (timestamps, requests/s): no files, no clock.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from deployments.recommend.pattern import DAY_S, Pattern, Profile, find_pattern

DAY_MIN = 1440
FLAGS = {"lead_s": "--prescale-lead", "slot_s": "--prescale-slot", "timezone": "--prescale-timezone",
         "min_days": "--prescale-min-days"}


class PrescaleSettings(BaseModel):
    """How `recommend` looks for a pattern and plans ahead of it (flags in FLAGS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lead_s: float = Field(default=900.0, description="raise the floor this long before the load rises")
    slot_s: float = Field(default=3600.0, description="scheduling slot: the profile's resolution and the windows' unit")
    timezone: str = Field(default="UTC", description="IANA zone the traffic follows (its hours and its weekdays)")
    min_days: int = Field(default=3, ge=2, description="whole days of history a pattern needs")
    min_explained: float = Field(default=0.5, gt=0, lt=1, description="share of the variance the profile must explain")
    shuffles: int = Field(default=500, ge=100, description="within-day shuffles the profile is held against")
    max_p: float = Field(default=0.01, gt=0, lt=1, description="how often a shuffle may explain as much")

    @field_validator("lead_s")
    @classmethod
    def _whole_minutes(cls, value: float) -> float:
        if value % 60 or not 0 <= value <= 6 * 3600:
            raise ValueError(f"{value:g} s is not whole minutes from 0 to 6 h (KEDA's cron schedules minutes); give e.g. 15m")
        return value

    @field_validator("slot_s")
    @classmethod
    def _divides_a_day(cls, value: float) -> float:
        if value % 60 or not 300 <= value <= 6 * 3600 or DAY_S % value:
            raise ValueError(f"{value:g} s does not split a day into whole-minute slots of 5 min to 6 h; give e.g. 30m or 1h")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone; give e.g. UTC or Europe/Berlin") from None
        return value

    @property
    def slots(self) -> int:
        return int(DAY_S // self.slot_s)

    @property
    def slot_min(self) -> int:
        return int(self.slot_s // 60)

    @property
    def lead_min(self) -> int:
        return int(self.lead_s // 60)


@dataclass(frozen=True)
class Window:
    """A raised replica floor on some weekdays over the slots whose typical load exceeds what min replicas carry, from
    `peak_start_min` to `end_min` (minutes after local midnight; an end before the start runs past midnight), raised
    `lead_min` ahead."""

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
        return {"days": self.label, "start": clock(self.start_min), "peak_start": clock(self.peak_start_min),
                "end": clock(self.end_min), "replicas": self.replicas, "typical_rps": round(self.typical_rps, 2),
                "p90_peak_rps": round(self.high_rps, 2), "days_above_min_capacity": f"{self.days_above} of {self.days_seen}"}


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

    @property
    def min_capacity_rps(self) -> float:
        return self.min_replicas * self.target_rps

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern, "verdict": self.verdict, "timezone": self.settings.timezone,
            "lead_minutes": self.settings.lead_min, "slot_minutes": self.settings.slot_min,
            "min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
            "target_rps_per_replica": round(self.target_rps, 2), "min_capacity_rps": round(self.min_capacity_rps, 2),
            "statistics": self.statistics, "profiles": [profile.as_dict() for profile in self.profiles],
            "windows": [window.as_dict() for window in self.windows], "reasoning": self.reasoning,
        }


def plan_prescale(times: np.ndarray, rps: np.ndarray, *, step_s: float, min_replicas: int, max_replicas: int,
                  target_rps: float, margin: float, settings: PrescaleSettings | None = None) -> PrescalePlan:
    """Find the request rate's daily or weekly pattern and plan replica floors ahead of its peaks (see the module)."""
    settings = settings or PrescaleSettings()
    plan = PrescalePlan(pattern="none", verdict="", settings=settings, min_replicas=min_replicas, max_replicas=max_replicas,
                        target_rps=target_rps)
    found = find_pattern(times, rps, step_s=step_s, settings=settings)
    plan.pattern, plan.reasoning, plan.statistics, plan.profiles = (found.pattern, found.reasoning, found.statistics,
                                                                    found.profiles)
    if found.pattern == "none":
        plan.verdict = found.verdict
        return plan
    for profile in plan.profiles:
        plan.windows.extend(_windows(profile, plan, margin))
    if plan.windows:
        plan.verdict = (f"{plan.pattern} pattern: {len(plan.windows)} window(s) where the typical load passes the "
                        f"{plan.min_capacity_rps:.1f} req/s that {min_replicas} replica(s) carry")
    else:
        peak = max(float(np.nanmax(profile.median)) for profile in plan.profiles)
        plan.verdict = (f"{plan.pattern} pattern, but its typical peak ({peak:.1f} req/s) stays within the "
                        f"{plan.min_capacity_rps:.1f} req/s that min replicas carry: nothing to schedule")
    plan.reasoning.append(plan.verdict)
    return plan


def _windows(profile: Profile, plan: PrescalePlan, margin: float) -> list[Window]:
    """Runs of slots (around midnight too) whose typical load passes what min replicas carry, merged where the lead
    would make them overlap, each sized for its high days."""
    settings, slots = plan.settings, len(profile.median)
    hot = np.nan_to_num(profile.median, nan=0.0) > plan.min_capacity_rps
    if not hot.any():
        return []
    if hot.all():
        plan.reasoning.append(f"{profile.label}: the typical load stays above {plan.min_capacity_rps:.1f} req/s all day: "
                              "raise the min replicas (--min-replicas-floor) rather than schedule them")
        return []
    runs = []  # (first slot, length), a run may wrap past the last slot
    start = int(np.flatnonzero(~hot)[0])  # begin the scan at a cold slot, so no run is cut at midnight
    index = 0
    while index < slots:
        slot = (start + index) % slots
        if hot[slot]:
            length = 0
            while length < slots and hot[(slot + length) % slots]:
                length += 1
            runs.append([slot, length])
            index += length
        else:
            index += 1
    merged: list[list[int]] = []
    for first, length in runs:
        if merged:
            gap = (first - (merged[-1][0] + merged[-1][1])) % slots
            if gap * settings.slot_min <= settings.lead_min:
                merged[-1][1] += gap + length
                continue
        merged.append([first, length])
    if len(merged) > 1:  # the last run may reach, within a lead, the first one of the next day
        gap = (merged[0][0] - (merged[-1][0] + merged[-1][1])) % slots
        if gap * settings.slot_min <= settings.lead_min:
            merged[-1][1] += gap + merged[0][1]
            merged.pop(0)
    windows = []
    for first, length in merged:
        if length * settings.slot_min + settings.lead_min >= DAY_MIN:
            plan.reasoning.append(f"{profile.label}: with its {settings.lead_min}-min lead the raised floor would last all "
                                  "day: raise the min replicas (--min-replicas-floor) rather than schedule them")
            continue
        covered = [(first + offset) % slots for offset in range(length)]
        high = float(np.nanmax(profile.high[covered]))
        typical = float(np.nanmax(profile.median[covered]))
        need = math.ceil(high * (1 + margin) / plan.target_rps)
        replicas = min(plan.max_replicas, max(plan.min_replicas + 1, need))
        levels = profile.levels[:, covered]
        seen = np.isfinite(levels).any(axis=1)
        above = (np.nan_to_num(levels, nan=0.0) > plan.min_capacity_rps).any(axis=1)
        peak_start = first * settings.slot_min
        end = peak_start + length * settings.slot_min
        end -= DAY_MIN if end > DAY_MIN else 0  # past midnight: the end comes before the start
        window = Window(label=profile.label, weekdays=profile.weekdays, peak_start_min=peak_start, end_min=end,
                        lead_min=settings.lead_min, replicas=replicas, typical_rps=typical, high_rps=high,
                        days_above=int((above & seen).sum()), days_seen=int(seen.sum()))
        windows.append(window)
        plan.reasoning.append(
            f"{profile.label} {clock(peak_start)}-{clock(end)} {settings.timezone}: typically {typical:.1f} req/s, "
            f"p90 peak {high:.1f} req/s, above the {plan.min_capacity_rps:.1f} req/s of {plan.min_replicas} replica(s) on "
            f"{window.days_above} of {window.days_seen} days -> ceil({high:.1f} x {1 + margin:.2f} / {plan.target_rps:.1f}) "
            f"= {need} replicas{f' (capped at max {plan.max_replicas})' if need > plan.max_replicas else ''} from "
            f"{clock(window.start_min)} ({settings.lead_min} min ahead)"
        )
    return windows


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
