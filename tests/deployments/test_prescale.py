"""Pre-scaling from history: a known daily or weekly peak gets cron triggers ahead of it, noise and bursts get none
(and the report says why), and the KEDA overlay that carries the triggers renders and validates."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import yaml

from deployments.recommend.outputs import (
    cron_schedules,
    cron_triggers,
    cron_weekdays,
    without_keda,
)
from deployments.recommend.prescale import (
    PrescaleSettings,
    Window,
    floor_at,
    plan_prescale,
)
from slipway.paths import PROJECT_ROOT
from tests.commands import run_command
from tests.deployments.traces import (
    DAY_S,
    MIB,
    bursts,
    daily_peak,
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
    return plan_prescale(stamps, values, step_s=300.0, min_replicas=min_replicas, max_replicas=max_replicas,
                         target_rps=TARGET, margin=MARGIN, settings=PrescaleSettings(**settings))


def test_a_daily_peak_gets_a_cron_trigger_a_lead_time_ahead_with_enough_replicas():
    stamps = times(7)
    values = daily_peak(stamps, BASE, PEAK, 9, 11)
    result = plan(stamps, values)
    assert result.pattern == "daily", result.reasoning
    needed = math.ceil(PEAK * (1 + MARGIN) / TARGET)
    assert cron_triggers(result) == [{"type": "cron", "metadata": {
        "timezone": "UTC", "start": "45 8 * * *", "end": "0 11 * * *", "desiredReplicas": str(needed)}}]
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
    short, short_values = without_day(*without_day(times(4), daily_peak(times(4), BASE, PEAK, 9, 11), "2023-11-16"),
                                      "2023-11-17")
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
    assert cron_triggers(result) == [{"type": "cron", "metadata": {
        "timezone": "Europe/Berlin", "start": "45 8 * * *", "end": "0 11 * * *", "desiredReplicas": "4"}}]
    assert np.all(floor_at(result, stamps) * TARGET >= values)
    # read in UTC the peak moves an hour earlier on the 26th: 07:00-09:00 UTC on most days, and 09:00 UTC (busy on the
    # three days before the change) is left to the reactive autoscaler
    utc = plan(stamps, values)
    assert [(w.peak_start_min, w.end_min) for w in utc.windows] == [(7 * 60, 9 * 60)]


@pytest.mark.parametrize("history", ["flat noise", "random bursts", "one day"])
def test_no_pattern_renders_no_trigger_and_says_why(history):
    stamps = times(1 if history == "one day" else 7)
    values = {"flat noise": noisy(np.full(stamps.shape, 60.0), 0.3),
              "random bursts": bursts(stamps, BASE, 6.0),
              "one day": daily_peak(stamps, BASE, PEAK, 9, 11)}[history]
    result = plan(stamps, values)
    assert result.pattern == "none" and not result.windows and cron_triggers(result) == []
    assert result.verdict.startswith("no daily pattern: ")
    expected = "at least 3 needed" if history == "one day" else "the load does not rise at the same hours day after day"
    assert expected in result.verdict and result.verdict in result.reasoning
    assert set(floor_at(result, stamps)) == {result.min_replicas}


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


def test_a_window_across_midnight_is_cut_there_so_each_schedule_keeps_its_weekdays():
    def window(start, end):
        return Window(label="weekdays", weekdays=(0, 1, 2, 3, 4), peak_start_min=start, end_min=end, lead_min=15,
                      replicas=3, typical_rps=90, high_rps=95, days_above=10, days_seen=10)

    # a peak from midnight: its lead falls on Sunday to Thursday evenings, the peak on Monday to Friday
    assert cron_schedules(window(0, 120)) == [("45 23 * * 0-4", "0 0 * * 1-5"), ("0 0 * * 1-5", "0 2 * * 1-5")]
    # a weekday peak from 22:00 to 01:00: the evenings and the small hours of Monday to Friday, as measured
    assert cron_schedules(window(22 * 60, 60)) == [("45 21 * * 1-5", "0 0 * * 2-6"), ("0 0 * * 1-5", "0 1 * * 1-5")]
    assert cron_weekdays((5, 6)) == "0,6" and cron_weekdays(tuple(range(7))) == "*" and cron_weekdays((0, 2, 3)) == "1,3-4"
    stamps = times(7)
    result = plan(stamps, daily_peak(stamps, BASE, PEAK, 0, 2))  # every day 00:00-02:00, 15 min ahead
    assert [(t["metadata"]["start"], t["metadata"]["end"]) for t in cron_triggers(result)] == [
        ("45 23 * * *", "0 0 * * *"), ("0 0 * * *", "0 2 * * *")]
    # without KEDA the two halves are one raise and one drop of min replicas, never both at midnight
    assert [entry["cron"] for entry in without_keda(result, model="digits", namespace="slipway")["schedule"]] == [
        "0 2 * * *", "45 23 * * *"]


def test_settings_are_strict():
    for bad in ({"lead_s": 90}, {"lead_s": -60}, {"slot_s": 7 * 60}, {"timezone": "Mars/Olympus"}, {"min_days": 1}, {"leed_s": 60}):
        with pytest.raises(ValueError):
            PrescaleSettings(**bad)


def _cli(tmp_path, reports_env, *args):
    env = {key: value for key, value in os.environ.items() if key != "PROMETHEUS_URL"}
    env.update({**reports_env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports"), "COLUMNS": "250"})
    return run_command("deployments", "recommend", *args, "--out-dir", str(tmp_path / "out"), cwd=PROJECT_ROOT, env=env,
                       timeout=120)


def _histories(tmp_path, rps):
    stamps = times(7)
    pods = ("digits-a", "digits-b")
    bodies = {"cpu": {pod: (stamps, np.full(stamps.shape, 0.3)) for pod in pods},
              "memory": {pod: (stamps, np.full(stamps.shape, 200.0 * MIB)) for pod in pods},
              "rps": {pod: (stamps, rps(stamps) / 2) for pod in pods}}
    return [arg for kind, body in bodies.items() for arg in (f"--{kind}", str(write(tmp_path, kind, matrix(body))))]


def test_the_command_writes_the_plan_a_keda_overlay_that_validates_and_a_plot(tmp_path, reports_env, seldon_crd_schema):
    from deployments.records import ModelVersion
    from deployments.render import render
    from deployments.validate import validate_documents

    args = _histories(tmp_path, lambda t: daily_peak(t, BASE, PEAK, 9, 11))
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50", "--prescale-lead", "20m")
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    prescale = report["prescale"]
    assert prescale["pattern"] == "daily" and prescale["lead_minutes"] == 20
    assert prescale["windows"] == [{"days": "every day", "start": "08:40", "peak_start": "09:00", "end": "11:00",
                                    "replicas": 4, "typical_rps": 100.0, "p90_peak_rps": 100.0,
                                    "days_above_min_capacity": "7 of 7"}]
    assert prescale["keda_triggers"][0]["metadata"]["start"] == "40 8 * * *"
    assert "hpaSpec/minReplicas" in prescale["without_keda"]["note"]
    assert prescale["without_keda"]["schedule"] == [{"cron": "40 8 * * *", "min_replicas": 4},
                                                    {"cron": "0 11 * * *", "min_replicas": 1}]
    assert (tmp_path / "reports" / "recommend-prescale.png").read_bytes().startswith(b"\x89PNG")
    assert yaml.safe_load((tmp_path / "out" / "prescale" / "triggers.yaml").read_text()) == prescale["keda_triggers"]
    # the KEDA overlay over the sizing overlay renders for a model version and passes every validation layer
    version = ModelVersion(name="digits", version="1", uri="s3://m/digits/1", digest="sha256:" + "ab" * 32)
    rendered = render(tmp_path / "out" / "prescale", model=version, engine="builtin")
    report_ = validate_documents(rendered.docs, crd_schema=seldon_crd_schema)
    assert report_.ok, report_.errors
    component = rendered.seldon_deployment["spec"]["predictors"][0]["componentSpecs"][0]
    assert "hpaSpec" not in component
    keda = component["kedaSpec"]
    assert (keda["minReplicaCount"], keda["maxReplicaCount"]) == (report["min_replicas"], report["max_replicas"])
    assert [trigger["type"] for trigger in keda["triggers"]] == ["prometheus", "cron"]
    assert keda["triggers"][0]["metadata"]["threshold"] == "35" and 'slipway_io_model="digits"' in keda["triggers"][0]["metadata"]["query"]
    assert keda["triggers"][1] == prescale["keda_triggers"][0]
    assert component["spec"]["containers"][0]["resources"]["requests"]["cpu"]  # the sizing overlay's resources stay
    # a later history without a pattern: no stale overlay left to apply, and the report says why
    result = _cli(tmp_path, reports_env, *_histories(tmp_path, lambda t: noisy(np.full(t.shape, 60.0), 0.3)),
                  "--capacity-rps", "50")
    assert result.returncode == 0, result.stderr
    prescale = json.loads((tmp_path / "reports" / "recommend.json").read_text())["prescale"]
    assert prescale["pattern"] == "none" and prescale["windows"] == [] and "keda_triggers" not in prescale
    assert prescale["verdict"].startswith("no daily pattern") and "no daily pattern" in result.stderr
    assert not (tmp_path / "out" / "prescale").exists() and (tmp_path / "out" / "overlay" / "patch.yaml").is_file()


def test_a_day_without_samples_between_two_generations_of_pods_is_named_in_the_report(tmp_path, reports_env):
    """One series with a hole is refused (usage.py), but a day without any pod, between pods replaced across it, reaches
    the planner: it leaves the day out, names it, and still finds the pattern."""
    stamps, _ = without_day(times(8), times(8), "2023-11-17")
    gap = int(np.argmax(np.diff(stamps)))
    before, after = stamps[: gap + 1], stamps[gap + 1 :]

    def bodies(value):
        return {"digits-a": (before, value(before)), "digits-b": (after, value(after))}
    files = {"cpu": bodies(lambda t: np.full(t.shape, 0.3)), "memory": bodies(lambda t: np.full(t.shape, 200.0 * MIB)),
             "rps": bodies(lambda t: daily_peak(t, BASE, PEAK, 9, 11))}
    args = [arg for kind, body in files.items() for arg in (f"--{kind}", str(write(tmp_path, kind, matrix(body))))]
    result = _cli(tmp_path, reports_env, *args, "--capacity-rps", "50")
    assert result.returncode == 0, result.stderr
    prescale = json.loads((tmp_path / "reports" / "recommend.json").read_text())["prescale"]
    assert prescale["statistics"]["missing_days"] == ["2023-11-17"] and prescale["pattern"] == "daily"
    assert [trigger["metadata"]["start"] for trigger in prescale["keda_triggers"]] == ["45 8 * * *"]


@pytest.mark.parametrize("flag, value, message", [
    ("--prescale-lead", "90s", "--prescale-lead: 90 s is not whole minutes from 0 to 6 h"),
    ("--prescale-lead", "7h", "--prescale-lead: 25200 s is not whole minutes from 0 to 6 h"),
    ("--prescale-slot", "7m", "--prescale-slot: 420 s does not split a day"),
    ("--prescale-timezone", "Mars/Olympus", "--prescale-timezone: 'Mars/Olympus' is not an IANA time zone"),
    ("--prescale-lead", "soon", "--prescale-lead: 'soon' is not a duration"),
])
def test_a_bad_prescale_flag_is_one_line_naming_it(tmp_path, reports_env, flag, value, message):
    result = _cli(tmp_path, reports_env, *_histories(tmp_path, lambda t: np.full(t.shape, 20.0)), "--capacity-rps", "50",
                  flag, value)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "reports" / "recommend.json").exists()
