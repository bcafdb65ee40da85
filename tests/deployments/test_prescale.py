"""Pre-scaling from history: a known daily or weekly peak gets cron triggers ahead of it, noise and bursts get none
(and the report says why), and the KEDA overlay that carries the triggers renders and validates."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import yaml

from deployments.sizing.recommend.outputs import (
    cron_schedules,
    cron_triggers,
    cron_weekdays,
    without_keda,
)
from deployments.sizing.recommend.prescale import (
    Window,
    floor_at,
    plan_prescale,
    week_floor,
)
from deployments.sizing.recommend.prescale_settings import PrescaleSettings
from slipway.paths import PROJECT_ROOT
from tests.commands import run_command
from tests.deployments.traces import (
    DAY_S,
    MIB,
    bursts,
    daily_peak,
    daily_sine,
    hour_of_day,
    matrix,
    noisy,
    times,
    weekday,
    without_day,
    write,
)

TARGET = 35.0  # 50 req/s per replica at the SLO, run at 70%
MARGIN = 0.15
BASE, PEAK = 20.0, 100.0  # 5x from 09:00 to 11:00 UTC


def plan(stamps, values, **settings):
    """The plan with recommend's replica bounds: min for the trough, max for the peak, at TARGET each."""
    max_replicas = math.ceil(float(values.max()) * (1 + MARGIN) / TARGET)
    min_replicas = min(max_replicas, max(1, math.ceil(float(values.min()) / TARGET)))
    return plan_prescale(
        stamps,
        values,
        step_s=300.0,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_rps=TARGET,
        margin=MARGIN,
        settings=PrescaleSettings(**settings),
    )


def test_a_daily_peak_gets_a_cron_trigger_a_lead_time_ahead_with_enough_replicas():
    stamps = times(7)
    values = daily_peak(stamps, BASE, PEAK, 9, 11)
    result = plan(stamps, values)
    assert result.pattern == "daily", result.reasoning
    needed = math.ceil(PEAK * (1 + MARGIN) / TARGET)
    assert cron_triggers(result) == [
        {
            "type": "cron",
            "metadata": {"timezone": "UTC", "start": "45 8 * * *", "end": "0 11 * * *", "desiredReplicas": str(needed)},
        }
    ]
    assert needed * TARGET >= PEAK > result.min_capacity_rps
    # the floor is up from 08:45 to 11:00 every day, at min replicas otherwise, and carries every sample of the peak
    floor = floor_at(result, stamps)
    hours = hour_of_day(stamps)
    assert set(floor[(hours >= 8.75) & (hours < 11)]) == {needed}
    assert set(floor[(hours < 8.75) | (hours >= 11)]) == {result.min_replicas}
    assert np.all(floor * TARGET >= values)
    assert result.statistics["daily_explained"] > 0.9 and result.statistics["daily_p"] <= 0.01
    # the lead and the slot are settings: half-hour slots find the same window, 30 min ahead
    longer = plan(stamps, values, lead_s=1800, slot_s=1800)
    assert [(t["metadata"]["start"], t["metadata"]["end"]) for t in cron_triggers(longer)] == [("30 8 * * *", "0 11 * * *")]


def test_a_peak_inside_a_slot_is_rounded_out_to_whole_slots():
    stamps = times(7)
    result = plan(stamps, daily_peak(stamps, BASE, PEAK, 9.5, 11.25))  # 09:30-11:15: slots 09:00-12:00
    (window,) = result.windows
    assert (window.peak_start_min, window.end_min, window.start_min) == (9 * 60, 12 * 60, 9 * 60 - 15)


def test_a_noisy_daily_peak_still_gets_its_trigger_sized_for_the_high_days():
    stamps = times(7)
    values = noisy(daily_peak(stamps, BASE, PEAK, 9, 11), 0.2)
    result = plan(stamps, values)
    (trigger,) = cron_triggers(result)
    assert (trigger["metadata"]["start"], trigger["metadata"]["end"]) == ("45 8 * * *", "0 11 * * *")
    (window,) = result.windows
    assert window.replicas * TARGET >= np.quantile(values[(hour_of_day(stamps) >= 9) & (hour_of_day(stamps) < 11)], 0.9)
    assert window.days_above == window.days_seen >= 6


def test_a_missed_day_is_left_out_and_named_and_the_pattern_still_found():
    stamps, values = without_day(times(8), daily_peak(times(8), BASE, PEAK, 9, 11), "2023-11-17")
    assert np.diff(stamps).max() >= DAY_S  # a whole day without samples
    result = plan(stamps, values)
    assert result.statistics["missing_days"] == ["2023-11-17"]
    assert any("1 day(s) missing (2023-11-17)" in line for line in result.reasoning)
    assert [(t["metadata"]["start"], t["metadata"]["end"]) for t in cron_triggers(result)] == [("45 8 * * *", "0 11 * * *")]
    # too few whole days once days are missing: it says so and plans nothing
    short, short_values = without_day(*without_day(times(4), daily_peak(times(4), BASE, PEAK, 9, 11), "2023-11-16"), "2023-11-17")
    sparse = plan(short, short_values)
    assert sparse.pattern == "none" and not sparse.windows
    assert "2 whole day(s) of history, at least 3 needed" in sparse.verdict


def test_the_pattern_follows_local_hours_across_a_daylight_saving_change():
    import datetime as dt
    from zoneinfo import ZoneInfo

    berlin = ZoneInfo("Europe/Berlin")
    stamps = 1_679_529_600.0 + np.arange(0, 8 * DAY_S, 300.0)  # 2023-03-23 to -31 UTC: clocks go forward on the 26th
    local = np.array([dt.datetime.fromtimestamp(stamp, berlin).hour for stamp in stamps])
    values = np.where((local >= 9) & (local < 11), PEAK, BASE)
    result = plan(stamps, values, timezone="Europe/Berlin")
    assert cron_triggers(result) == [
        {
            "type": "cron",
            "metadata": {"timezone": "Europe/Berlin", "start": "45 8 * * *", "end": "0 11 * * *", "desiredReplicas": "4"},
        }
    ]
    assert np.all(floor_at(result, stamps) * TARGET >= values)
    # read in UTC the peak moves an hour earlier on the 26th: 07:00-09:00 UTC on most days, 08:00-10:00 UTC on the three
    # days before the change, which puts 09:00 UTC's p90 at the peak too: one window from 07:00 to 10:00 UTC
    utc = plan(stamps, values)
    assert [(w.peak_start_min, w.end_min, w.replicas) for w in utc.windows] == [(7 * 60, 10 * 60, 4)]


@pytest.mark.parametrize("history", ["flat noise", "random bursts", "one day"])
def test_no_pattern_renders_no_trigger_and_says_why(history):
    stamps = times(1 if history == "one day" else 7)
    values = {
        "flat noise": noisy(np.full(stamps.shape, 60.0), 0.3),
        "random bursts": bursts(stamps, BASE, 6.0),
        "one day": daily_peak(stamps, BASE, PEAK, 9, 11),
    }[history]
    result = plan(stamps, values)
    assert result.pattern == "none" and not result.windows and cron_triggers(result) == []
    assert result.verdict.startswith("no daily pattern: ")
    expected = "at least 3 needed" if history == "one day" else "the load does not rise at the same hours day after day"
    assert expected in result.verdict and result.verdict in result.reasoning
    assert set(floor_at(result, stamps)) == {result.min_replicas}
    if history != "one day":
        assert "nothing is scheduled" in result.verdict
    assert result.replica_hours is None and result.under_p90 == []  # no profile to count against


def test_a_pattern_that_stays_within_min_replicas_plans_nothing():
    stamps = times(7)
    result = plan(stamps, daily_peak(stamps, 40.0, 60.0, 9, 11))  # min = ceil(40 / 35) = 2 replicas carry 70 req/s
    assert result.pattern == "daily" and not result.windows
    assert "stays within the 70.0 req/s that min replicas carry" in result.verdict


def test_weekday_peaks_and_quiet_weekends_get_weekday_triggers_from_two_weeks_on():
    weekdays = (0, 1, 2, 3, 4)
    stamps = times(15)
    values = noisy(daily_peak(stamps, BASE, PEAK, 9, 11, weekdays=weekdays), 0.1)
    result = plan(stamps, values)
    assert result.pattern == "weekly", result.reasoning
    assert [profile.label for profile in result.profiles] == ["weekdays", "weekends"]
    assert [(t["metadata"]["start"], t["metadata"]["end"]) for t in cron_triggers(result)] == [("45 8 * * 1-5", "0 11 * * 1-5")]
    floor = floor_at(result, stamps)
    peak_hours = (hour_of_day(stamps) >= 9) & (hour_of_day(stamps) < 11)
    assert set(floor[peak_hours & (weekday(stamps) >= 5)]) == {result.min_replicas}  # quiet weekends stay at min
    assert np.all(floor[peak_hours & (weekday(stamps) < 5)] * TARGET >= PEAK)
    # one week is not enough to tell weekends apart: a daily pattern, and the reasoning says why not weekly
    week = plan(stamps[: 7 * 288], values[: 7 * 288])
    assert week.pattern == "daily" and any(line.startswith("weekly: not looked for") for line in week.reasoning)


def _slot_p90(stamps, values, hour, days=None):
    """The p90 of every sample in one UTC hour of the day (on `days`, weekdays Monday 0): what the plan sizes for."""
    chosen = hour_of_day(stamps).astype(int) == hour
    if days is not None:
        chosen &= np.isin(weekday(stamps), days)
    return float(np.quantile(values[chosen], 0.9))


def _hourly_floor(result, day=0):
    """The plan's floor in each UTC hour of one weekday, at half past: away from the 15-min leads."""
    return week_floor(result)[day, 30::60]


def test_a_daily_sine_gets_a_floor_in_steps_that_tracks_its_p90():
    """The issue's trace: 8 days of a daily sine from 30 to 150 req/s, highest at 20:00 UTC. One window at the peak's
    replicas held 21 h a day; the steps follow the sine within one replica of ceil(p90 / target) in every hour."""
    stamps = times(8)
    values = noisy(daily_sine(stamps, 30.0, 150.0, 20), 0.1)
    result = plan(stamps, values)
    assert result.pattern == "daily", result.reasoning
    profile = [math.ceil(_slot_p90(stamps, values, hour) / TARGET) for hour in range(24)]
    floor = _hourly_floor(result)
    assert all(abs(int(have) - want) <= 1 and have >= want for have, want in zip(floor, profile)), (list(floor), profile)
    assert len(set(floor)) >= 4 and len(result.windows) >= 4  # steps, not one window at the peak
    assert floor[20] == floor.max() and floor[8] == floor.min()  # the peak and the trough
    # rising steps start the lead early, falling ones do not
    rising = [window for window in result.windows if window.lead_min]
    assert rising and all(window.lead_min == 15 for window in rising)
    assert all(floor[(window.peak_start_min // 60 - 1) % 24] < window.replicas for window in rising)
    hours = result.replica_hours
    assert hours["static_peak_replicas"] == max(profile) and hours["static_peak"] == 24 * max(profile)
    assert hours["profile"] == sum(profile)
    assert hours["profile"] <= hours["plan"] < hours["static_peak"], hours
    assert result.under_p90 == []
    # the KEDA triggers carry the same steps: at any minute the highest trigger running is the floor
    triggers = cron_triggers(result)
    assert len(triggers) >= len(result.windows)
    assert {int(trigger["metadata"]["desiredReplicas"]) for trigger in triggers} == {w.replicas for w in result.windows}


def test_a_business_hours_plateau_is_two_levels_with_exact_replica_hours():
    stamps = times(7)
    values = daily_peak(stamps, BASE, 150.0, 9, 17)  # 20 req/s, 150 req/s from 09:00 to 17:00 UTC
    result = plan(stamps, values)
    (window,) = result.windows
    needed = math.ceil(150.0 * (1 + MARGIN) / TARGET)  # 5
    assert (window.start_min, window.end_min, window.replicas) == (8 * 60 + 45, 17 * 60, needed)
    assert set(_hourly_floor(result)) == {result.min_replicas, needed} == {1, 5}
    # static: 5 all day = 120; the plan: 5 for 8 h 15 min, 1 for the rest = 57; the profile: 5 for 8 h, 1 for 16 h = 56
    assert {key: result.replica_hours[key] for key in ("static_peak", "plan", "profile")} == {
        "static_peak": 120.0,
        "plan": 57.0,
        "profile": 56.0,
    }
    # max replicas below what the plateau needs: those slots are listed, and why
    capped = plan_prescale(stamps, values, step_s=300.0, min_replicas=1, max_replicas=3, target_rps=TARGET, margin=MARGIN)
    assert [slot["slot"] for slot in capped.under_p90] == [f"{hour:02d}:00-{hour + 1:02d}:00" for hour in range(9, 17)]
    assert capped.under_p90[0] == {
        "days": "every day",
        "slot": "09:00-10:00",
        "p90_rps": 150.0,
        "replicas": 3,
        "carries_rps": 105.0,
        "why": "capped at max 3 replicas",
    }
    assert any("carries less than the p90 in 8 slot(s)" in line for line in capped.reasoning)


def test_a_weekly_pattern_gets_weekday_and_weekend_steps_and_replica_hours_per_kind_of_day():
    """The code tells weekdays from weekends from two weeks on (pattern.py): each kind of day gets its own steps."""
    stamps = times(15)
    weekdays = (0, 1, 2, 3, 4)
    values = noisy(
        np.where(
            np.isin(weekday(stamps), weekdays), daily_peak(stamps, BASE, 140.0, 9, 17), daily_peak(stamps, BASE, 70.0, 10, 14)
        ),
        0.05,
    )
    result = plan(stamps, values)
    assert result.pattern == "weekly", result.reasoning
    schedules = {(t["metadata"]["start"], t["metadata"]["end"], t["metadata"]["desiredReplicas"]) for t in cron_triggers(result)}
    weekday_need = math.ceil(_slot_p90(stamps, values, 12, weekdays) * (1 + MARGIN) / TARGET)
    weekend_need = math.ceil(_slot_p90(stamps, values, 12, (5, 6)) * (1 + MARGIN) / TARGET)
    assert (weekday_need, weekend_need) == (5, 3)
    assert schedules == {("45 8 * * 1-5", "0 17 * * 1-5", "5"), ("45 9 * * 0,6", "0 14 * * 0,6", "3")}
    by_days = {day["days"]: day for day in result.replica_hours["by_days"]}
    assert by_days["weekdays"]["plan"] == 57.0 and by_days["weekends"]["plan"] == 24 - 4.25 + 3 * 4.25
    assert result.replica_hours["plan"] == round((5 * 57.0 + 2 * by_days["weekends"]["plan"]) / 7, 2)
    assert result.replica_hours["static_peak"] == 120.0  # no schedule: the week's highest p90 every day


def test_a_weekly_pattern_in_one_week_is_planned_as_a_daily_one_and_says_so():
    """With less than two weeks the weekend cannot be told apart: the plan is daily, sized for the weekdays' p90
    (every slot's p90 over all days), and the reasoning says why it did not look for weeks."""
    stamps = times(7)
    values = daily_peak(stamps, BASE, 150.0, 9, 17, weekdays=(0, 1, 2, 3, 4))
    result = plan(stamps, values)
    assert result.pattern == "daily" and any(line.startswith("weekly: not looked for") for line in result.reasoning)
    (window,) = result.windows
    assert window.weekdays == tuple(range(7)) and window.replicas == 5


def test_a_window_across_midnight_is_cut_there_so_each_schedule_keeps_its_weekdays():
    def window(start, end):
        return Window(
            label="weekdays",
            weekdays=(0, 1, 2, 3, 4),
            peak_start_min=start,
            end_min=end,
            lead_min=15,
            replicas=3,
            typical_rps=90,
            high_rps=95,
            days_above=10,
            days_seen=10,
        )

    # a peak from midnight: its lead falls on Sunday to Thursday evenings, the peak on Monday to Friday
    assert cron_schedules(window(0, 120)) == [("45 23 * * 0-4", "0 0 * * 1-5"), ("0 0 * * 1-5", "0 2 * * 1-5")]
    # a weekday peak from 22:00 to 01:00: the evenings and the small hours of Monday to Friday, as measured
    assert cron_schedules(window(22 * 60, 60)) == [("45 21 * * 1-5", "0 0 * * 2-6"), ("0 0 * * 1-5", "0 1 * * 1-5")]
    assert cron_weekdays((5, 6)) == "0,6" and cron_weekdays(tuple(range(7))) == "*" and cron_weekdays((0, 2, 3)) == "1,3-4"
    stamps = times(7)
    result = plan(stamps, daily_peak(stamps, BASE, PEAK, 0, 2))  # every day 00:00-02:00, 15 min ahead
    assert [(t["metadata"]["start"], t["metadata"]["end"]) for t in cron_triggers(result)] == [
        ("45 23 * * *", "0 0 * * *"),
        ("0 0 * * *", "0 2 * * *"),
    ]
    # without KEDA the two halves are one raise and one drop of min replicas, never both at midnight
    assert [entry["cron"] for entry in without_keda(result, model="digits", namespace="slipway")["schedule"]] == [
        "0 2 * * *",
        "45 23 * * *",
    ]


def test_settings_are_strict():
    for bad in (
        {"lead_s": 90},
        {"lead_s": -60},
        {"slot_s": 7 * 60},
        {"timezone": "Mars/Olympus"},
        {"min_days": 1},
        {"leed_s": 60},
    ):
        with pytest.raises(ValueError):
            PrescaleSettings(**bad)


def _cli(tmp_path, reports_env, *args):
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_URL"}
    env.update({**reports_env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports"), "COLUMNS": "250"})
    command = ("deployments", "recommend", "--model", "digits", *args, "--out-dir", str(tmp_path / "out"))  # no cluster to ask
    return run_command(*command, cwd=PROJECT_ROOT, env=env, timeout=120)


def _histories(tmp_path, rps, days=7):
    stamps = times(days)
    pods = ("digits-a", "digits-b")
    bodies = {
        "cpu": {pod: (stamps, np.full(stamps.shape, 0.3)) for pod in pods},
        "memory": {pod: (stamps, np.full(stamps.shape, 200.0 * MIB)) for pod in pods},
        "rps": {pod: (stamps, rps(stamps) / 2) for pod in pods},
    }
    return [arg for kind, body in bodies.items() for arg in (f"--{kind}", str(write(tmp_path, kind, matrix(body))))]


def test_the_command_writes_the_plan_a_keda_overlay_that_validates_and_a_plot(tmp_path, reports_env, seldon_crd_schema):
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import ModelVersion
    from deployments.render.validate import validate_documents

    args = _histories(tmp_path, lambda t: daily_peak(t, BASE, PEAK, 9, 11))
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50", "--prescale-lead", "20m")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    prescale = report["prescale"]
    assert prescale["pattern"] == "daily" and prescale["lead_minutes"] == 20
    assert prescale["windows"] == [
        {
            "days": "every day",
            "start": "08:40",
            "peak_start": "09:00",
            "end": "11:00",
            "replicas": 4,
            "typical_rps": 100.0,
            "p90_rps": 100.0,
            "days_above_min_capacity": "7 of 7",
        }
    ]
    assert prescale["keda_triggers"][0]["metadata"]["start"] == "40 8 * * *"
    assert "hpaSpec/minReplicas" in prescale["without_keda"]["note"]
    assert prescale["without_keda"]["schedule"] == [
        {"cron": "40 8 * * *", "min_replicas": 4},
        {"cron": "0 11 * * *", "min_replicas": 1},
    ]
    assert (tmp_path / "reports" / "recommend-prescale.png").read_bytes().startswith(b"\x89PNG")
    assert yaml.safe_load((tmp_path / "out" / "prescale" / "triggers.yaml").read_text()) == prescale["keda_triggers"]
    # the KEDA overlay over the sizing overlay renders for a model version and passes every validation layer
    version = ModelVersion(name="digits", version="1", uri="s3://m/digits/1", digest="sha256:" + "ab" * 32)
    rendered = render(tmp_path / "out" / "prescale", RenderOptions(model=version, engine="builtin"))
    report_ = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report_.ok, report_.errors
    component = rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]
    assert "hpaSpec" not in component
    keda = component["kedaSpec"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (report["min_replicas"], report["max_replicas"])
    assert [trigger["type"] for trigger in keda["triggers"]] == ["prometheus", "cron"]
    assert (
        keda["triggers"][0]["metadata"]["threshold"] == "35"
        and 'slipway_io_model="digits"' in keda["triggers"][0]["metadata"]["query"]
    )
    assert keda["triggers"][1] == prescale["keda_triggers"][0]
    assert component["spec"]["containers"][0]["resources"]["requests"]["cpu"]  # the sizing overlay's resources stay
    # a later history without a pattern: no stale overlay left to apply, and the report says why
    result = _cli(
        tmp_path, reports_env, *_histories(tmp_path, lambda t: noisy(np.full(t.shape, 60.0), 0.3)), "--capacity-rps", "50"
    )
    assert result.returncode == 0, result.stderr
    prescale = json.loads((tmp_path / "reports" / "recommend.json").read_text())["prescale"]
    assert prescale["pattern"] == "none" and prescale["windows"] == [] and "keda_triggers" not in prescale
    assert prescale["verdict"].startswith("no daily pattern") and "no daily pattern" in result.stderr
    assert not (tmp_path / "out" / "prescale").exists() and (tmp_path / "out" / "overlay" / "patch.yaml").is_file()


def _active(schedule: str) -> int:
    """The minute of the day a daily (`* * *`) cron schedule fires at: "45 8 * * *" is 525."""
    minute, hour, *_ = schedule.split()
    return int(hour) * 60 + int(minute)


def test_the_command_renders_the_stepped_floor_of_a_sine_as_keda_cron_triggers(tmp_path, reports_env, seldon_crd_schema):
    """The issue's trace through the command: 8 days of a daily sine from 30 to 150 req/s over 2 pods. The report gives
    the three replica-hours, the overlay carries a cron trigger per step, and it renders and validates."""
    from deployments.render.overlay import RenderOptions, render
    from deployments.render.records import ModelVersion
    from deployments.render.validate import validate_documents

    args = _histories(tmp_path, lambda t: noisy(daily_sine(t, 30.0, 150.0, 20), 0.1), days=8)
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50")
    assert result.returncode == 0, result.stderr
    prescale = json.loads((tmp_path / "reports" / "recommend.json").read_text())["prescale"]
    hours = prescale["replica_hours_per_day"]
    assert hours["profile"] <= hours["plan"] < hours["static_peak"], hours
    assert prescale["slots_under_p90"] == [] and "replica-hours per day" in result.stderr
    assert len(prescale["windows"]) >= 4 and len(prescale["profiles"][0]["p90_rps"]) == 24
    # the triggers, replayed over a day (KEDA keeps the most any running trigger asks for), give the plan's floor
    floor = np.full(1440, prescale["min_replicas"])
    for trigger in prescale["keda_triggers"]:
        start, end = _active(trigger["metadata"]["start"]), _active(trigger["metadata"]["end"]) or 1440
        floor[start:end] = np.maximum(floor[start:end], int(trigger["metadata"]["desiredReplicas"]))
    assert round(float(floor.sum()) / 60, 2) == hours["plan"]
    assert (tmp_path / "reports" / "recommend-prescale.png").read_bytes().startswith(b"\x89PNG")
    version = ModelVersion(name="digits", version="1", uri="s3://m/digits/1", digest="sha256:" + "ab" * 32)
    rendered = render(tmp_path / "out" / "prescale", RenderOptions(model=version, engine="builtin"))
    report = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report.ok, report.errors
    keda = rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]["kedaSpec"]
    assert keda["triggers"][0]["type"] == "prometheus" and keda["triggers"][1:] == prescale["keda_triggers"]


def test_a_day_without_samples_between_two_generations_of_pods_is_named_in_the_report(tmp_path, reports_env):
    """One series with a hole is refused (usage.py), but a day without any pod, between pods replaced across it, reaches
    the planner: it leaves the day out, names it, and still finds the pattern."""
    stamps, _ = without_day(times(8), times(8), "2023-11-17")
    gap = int(np.argmax(np.diff(stamps)))
    before, after = stamps[: gap + 1], stamps[gap + 1 :]

    def bodies(value):
        return {"digits-a": (before, value(before)), "digits-b": (after, value(after))}

    files = {
        "cpu": bodies(lambda t: np.full(t.shape, 0.3)),
        "memory": bodies(lambda t: np.full(t.shape, 200.0 * MIB)),
        "rps": bodies(lambda t: daily_peak(t, BASE, PEAK, 9, 11)),
    }
    args = [arg for kind, body in files.items() for arg in (f"--{kind}", str(write(tmp_path, kind, matrix(body))))]
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50")
    assert result.returncode == 0, result.stderr
    prescale = json.loads((tmp_path / "reports" / "recommend.json").read_text())["prescale"]
    assert prescale["statistics"]["missing_days"] == ["2023-11-17"] and prescale["pattern"] == "daily"
    assert [trigger["metadata"]["start"] for trigger in prescale["keda_triggers"]] == ["45 8 * * *"]


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--prescale-lead", "90s", "--prescale-lead: 90 s is not whole minutes from 0 to 6 h"),
        ("--prescale-lead", "7h", "--prescale-lead: 25200 s is not whole minutes from 0 to 6 h"),
        ("--prescale-slot", "7m", "--prescale-slot: 420 s does not split a day"),
        ("--prescale-timezone", "Mars/Olympus", "--prescale-timezone: 'Mars/Olympus' is not an IANA time zone"),
        ("--prescale-lead", "soon", "--prescale-lead: 'soon' is not a duration"),
    ],
)
def test_a_bad_prescale_flag_is_one_line_naming_it(tmp_path, reports_env, flag, value, message):
    result = _cli(
        tmp_path, reports_env, *_histories(tmp_path, lambda t: np.full(t.shape, 20.0)), "--capacity-rps", "50", flag, value
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "reports" / "recommend.json").exists()
