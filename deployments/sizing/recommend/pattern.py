"""Is there a daily or weekly pattern in the request rate? The history cut into local days and slots, and tested.

A schedule is only worth rendering for load that comes back at the same hours, so the pattern has to earn
it: over enough whole days, the hour-of-day profile must explain most of the variance of the slots'
request rate, and more than it explains after each day's slots are shuffled (which keeps day-to-day noise
and destroys the hours). With about two weeks, separate weekday and weekend profiles must explain clearly
more than one profile, and more than with the weekends shuffled among the days. Pure, seeded: the same
history always gets the same verdict.
"""

from __future__ import annotations

import datetime as dt
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal
from zoneinfo import ZoneInfo

import numpy as np

from deployments.sizing.recommend.prescale_settings import PrescaleSettings

CELL_COVERAGE = 0.5  # a slot of one day counts when at least half its samples are there...
FULL_DAY_SHARE = 0.9  # ...and a day is whole when 90% of its slots count (a DST day lacks one hour)
WEEKDAYS = (0, 1, 2, 3, 4)  # Python's numbering: Monday is 0
WEEKEND = (5, 6)
WEEKLY_MIN_WEEKDAYS = 6  # two weeks' worth, one day may be missing
WEEKLY_MIN_WEEKEND_DAYS = 3
MIN_WEEKLY_GAIN = 0.1  # splitting weekdays from weekends must explain 10 points more of the variance
Pattern = Literal["none", "daily", "weekly"]


@dataclass(frozen=True)
class Cells:
    """The history cut into local days x slots: each cell's mean and peak requests/s (NaN where too few samples), and
    each sample's day and slot."""

    days: list[dt.date]
    level: np.ndarray  # [day, slot] mean requests/s
    peak: np.ndarray  # [day, slot] highest sample
    slots: int
    row: np.ndarray  # each sample's day (index into days)
    column: np.ndarray  # each sample's slot
    values: np.ndarray  # each sample's requests/s

    @property
    def weekdays(self) -> np.ndarray:
        return np.array([day.weekday() for day in self.days], dtype=int)

    @property
    def full(self) -> np.ndarray:
        """Which days are whole (FULL_DAY_SHARE of their slots observed)."""
        return np.isfinite(self.level).sum(axis=1) >= FULL_DAY_SHARE * self.slots

    def missing(self) -> list[dt.date]:
        """Days between the first and the last without a single observed slot."""
        seen = {self.days[index] for index in np.flatnonzero(np.isfinite(self.level).any(axis=1))}
        if not seen:
            return []
        first, last = min(seen), max(seen)
        return [first + dt.timedelta(days=n) for n in range((last - first).days + 1) if first + dt.timedelta(days=n) not in seen]


@dataclass(frozen=True)
class Profile:
    """One kind of day's pattern per slot: the typical day (median of slot means), the p90 of the slot's request rate
    (every sample of the slot on the chosen days: what the pre-scaling plan sizes for) and a high day (p90 of the
    slot's peaks)."""

    label: str  # "every day", "weekdays", "weekends"
    weekdays: tuple[int, ...]
    median: np.ndarray
    high: np.ndarray
    days: int
    levels: np.ndarray  # [chosen day, slot] mean requests/s: how each day compares with the profile
    p90: np.ndarray

    def as_dict(self) -> dict[str, Any]:
        return {
            "days": self.label,
            "whole_days": self.days,
            "median_rps": _rounded(self.median),
            "p90_rps": _rounded(self.p90),
            "p90_peak_rps": _rounded(self.high),
        }


@dataclass
class Finding:
    """What the history shows: the pattern (or "none" and why), a profile per kind of day, and the statistics."""

    pattern: Pattern = "none"
    verdict: str = ""
    reasoning: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=dict)
    profiles: list[Profile] = field(default_factory=list)


def cut_cells(times: np.ndarray, values: np.ndarray, *, step_s: float, settings: PrescaleSettings) -> Cells:
    """Each sample to its local day and slot in `settings.timezone`; per cell the mean and the peak."""
    zone = ZoneInfo(settings.timezone)
    local = [dt.datetime.fromtimestamp(float(t), zone) for t in times]
    dates = [moment.date() for moment in local]
    seconds = np.array([moment.hour * 3600 + moment.minute * 60 + moment.second for moment in local], dtype=float)
    first = min(dates)
    days = [first + dt.timedelta(days=n) for n in range((max(dates) - first).days + 1)]
    row = np.array([(date - first).days for date in dates], dtype=int)
    column = np.minimum((seconds // settings.slot_s).astype(int), settings.slots - 1)
    shape = (len(days), settings.slots)
    counts, sums, peaks = np.zeros(shape), np.zeros(shape), np.full(shape, -np.inf)
    np.add.at(counts, (row, column), 1)
    np.add.at(sums, (row, column), values)
    np.maximum.at(peaks, (row, column), values)
    enough = counts >= CELL_COVERAGE * settings.slot_s / step_s
    level = np.where(enough, sums / np.maximum(counts, 1), np.nan)
    return Cells(
        days=days,
        level=level,
        peak=np.where(enough, peaks, np.nan),
        slots=settings.slots,
        row=row,
        column=column,
        values=np.asarray(values, dtype=float),
    )


def explained(level: np.ndarray, groups: np.ndarray) -> float:
    """The share of the variance of the observed cells that their group means explain (eta squared)."""
    seen = np.isfinite(level)
    values, labels = level[seen], groups[seen]
    total = float(((values - values.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    means = np.bincount(labels, weights=values) / np.maximum(np.bincount(labels), 1)
    return 1.0 - float(((values - means[labels]) ** 2).sum()) / total


def _slot_groups(cells: Cells, day_type: np.ndarray | None = None) -> np.ndarray:
    slots = np.broadcast_to(np.arange(cells.slots), cells.level.shape)
    return slots if day_type is None else slots + cells.slots * day_type[:, None]


def shuffled_hours(cells: Cells, observed: float, rng: np.random.Generator, shuffles: int) -> int:
    """How many of `shuffles` within-day shuffles of the slots explain at least `observed`: day-to-day noise."""
    rows = [np.flatnonzero(np.isfinite(cells.level[day])) for day in range(len(cells.days))]
    groups = _slot_groups(cells)
    hits = 0
    for _ in range(shuffles):
        level = np.full(cells.level.shape, np.nan)
        for day, seen in enumerate(rows):
            level[day, seen] = rng.permutation(cells.level[day, seen])
        hits += explained(level, groups) >= observed - 1e-12
    return hits


def shuffled_day_types(cells: Cells, weekend: np.ndarray, gain: float, rng: np.random.Generator, shuffles: int) -> int:
    """How many of `shuffles` shuffles of which days are weekends gain at least `gain` from the weekday/weekend split."""
    daily = explained(cells.level, _slot_groups(cells))
    hits = 0
    for _ in range(shuffles):
        split = explained(cells.level, _slot_groups(cells, rng.permutation(weekend)))
        hits += split - daily >= gain - 1e-12
    return hits


def find_pattern(times: np.ndarray, rps: np.ndarray, *, step_s: float, settings: PrescaleSettings) -> Finding:
    """The request rate's daily or weekly pattern, with a profile per kind of day, or why there is none."""
    found = Finding()
    if step_s > settings.slot_s:
        found.verdict = (
            f"no daily pattern: not looked for, the history's step ({step_s / 60:g} min) is coarser than a "
            f"scheduling slot ({settings.slot_min} min); query a finer --step or pass a longer --prescale-slot"
        )
        found.reasoning.append(found.verdict)
        return found
    cells = cut_cells(times, rps, step_s=step_s, settings=settings)
    full, missing = cells.full, cells.missing()
    whole = int(full.sum())
    found.statistics = {
        "whole_days": whole,
        "partial_days": int(len(cells.days) - whole - len(missing)),
        "missing_days": [str(day) for day in missing],
    }
    found.reasoning.append(
        f"pattern: {whole} whole day(s) of history in {settings.timezone} ({found.statistics['partial_days']} partial, "
        f"their observed slots used), cut into {settings.slot_min}-min slots"
        + (f"; {len(missing)} day(s) missing ({', '.join(map(str, missing[:5]))}), left out" if missing else "")
    )
    if whole < settings.min_days:
        found.verdict = (
            f"no daily pattern: {whole} whole day(s) of history, at least {settings.min_days} needed to tell a "
            f"pattern from day-to-day noise; query a longer --range"
        )
        found.reasoning.append(found.verdict)
        return found
    rng = np.random.default_rng(0)  # the same history always gets the same verdict
    daily = explained(cells.level, _slot_groups(cells))
    daily_hits = shuffled_hours(cells, daily, rng, settings.shuffles)
    daily_p = (daily_hits + 1) / (settings.shuffles + 1)
    found.statistics.update(daily_explained=round(daily, 4), daily_p=round(daily_p, 4))
    daily_found = daily >= settings.min_explained and daily_p <= settings.max_p
    found.reasoning.append(
        f"daily: the hour-of-day profile explains {daily:.0%} of the variance of the {settings.slot_min}-min request rate "
        f"(at least {settings.min_explained:.0%} needed); {daily_hits} of {settings.shuffles} shuffles of each day's slots "
        f"explained as much (p = {daily_p:.3f}, at most {settings.max_p:g} needed)"
    )
    weekly_found = False
    weekend = np.isin(cells.weekdays, WEEKEND).astype(int)
    whole_weekend, whole_weekdays = int((full & (weekend == 1)).sum()), int((full & (weekend == 0)).sum())
    if whole_weekend >= WEEKLY_MIN_WEEKEND_DAYS and whole_weekdays >= WEEKLY_MIN_WEEKDAYS:
        split = explained(cells.level, _slot_groups(cells, weekend))
        gain = split - daily
        weekly_hits = shuffled_day_types(cells, weekend, gain, rng, settings.shuffles)
        weekly_p = (weekly_hits + 1) / (settings.shuffles + 1)
        weekly_found = split >= settings.min_explained and gain >= MIN_WEEKLY_GAIN and weekly_p <= settings.max_p
        found.statistics.update(weekly_explained=round(split, 4), weekly_gain=round(gain, 4), weekly_p=round(weekly_p, 4))
        found.reasoning.append(
            f"weekly: separate weekday and weekend profiles explain {split:.0%} ({gain:+.0%}, at least "
            f"+{MIN_WEEKLY_GAIN:.0%} needed); {weekly_hits} of {settings.shuffles} shuffles of which days are weekends "
            f"gained as much (p = {weekly_p:.3f})"
        )
    else:
        found.reasoning.append(
            f"weekly: not looked for ({whole_weekdays} whole weekdays and {whole_weekend} whole weekend "
            f"days; {WEEKLY_MIN_WEEKDAYS} and {WEEKLY_MIN_WEEKEND_DAYS} needed, about two weeks)"
        )
    if weekly_found:
        found.pattern = "weekly"
        kinds = [("weekdays", WEEKDAYS, weekend == 0), ("weekends", WEEKEND, weekend == 1)]
    elif daily_found:
        found.pattern = "daily"
        kinds = [("every day", tuple(range(7)), np.ones(len(cells.days), dtype=bool))]
    else:
        found.verdict = (
            "no daily pattern: "
            + (
                "the request rate is flat"
                if daily == 0
                else f"the hour-of-day profile explains {daily:.0%} of the variance (p = {daily_p:.3f}); the load does "
                "not rise at the same hours day after day"
            )
            + ", so nothing is scheduled and the reactive "
            "autoscaler alone follows it"
        )
        found.reasoning.append(found.verdict)
        return found
    found.profiles = [_profile(cells, label, weekdays, chosen & full, chosen) for label, weekdays, chosen in kinds]
    return found


def _profile(cells: Cells, label: str, weekdays: tuple[int, ...], whole: np.ndarray, chosen: np.ndarray) -> Profile:
    """Median, p90 and p90 peak per slot over the chosen days (partial days add the slots they have)."""
    level, peak = cells.level[chosen], cells.peak[chosen]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a slot no chosen day observed stays NaN
        median = np.nanmedian(level, axis=0)
        high = np.nanquantile(peak, 0.9, axis=0)
    counted = chosen[cells.row] & np.isfinite(cells.level[cells.row, cells.column])  # samples of the cells that count
    p90 = np.full(cells.slots, np.nan)
    for slot in range(cells.slots):
        samples = cells.values[counted & (cells.column == slot)]
        if samples.size:
            p90[slot] = np.quantile(samples, 0.9)
    return Profile(label=label, weekdays=weekdays, median=median, high=high, days=int(whole.sum()), levels=level, p90=p90)


def _rounded(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(value) else round(float(value), 2) for value in values]
