"""Shapes, step figures and the saturation rule, on figures with known answers (no Locust running)."""

import dataclasses

import pytest

from loadtest.config import ConfigError, ShapeSpec, build_shape, parse_host
from loadtest.planner import StagePlanner
from loadtest.steps import Snapshot, StepFigures, figures_between, is_saturated, percentile, saturation_point
from slipway.slo import Slo


def step(index, users, rps, p95=10.0, requests=1000, failures=0):
    return StepFigures(
        index=index,
        name=f"step {index + 1}",
        users=users,
        started_s=index * 5.0,
        duration_s=4.0,
        requests=requests,
        failures=failures,
        rps=rps,
        p50_ms=p95 / 2,
        p90_ms=p95,
        p95_ms=p95,
        p99_ms=p95 * 2,
    )


def test_figures_between_two_snapshots_are_that_step_alone():
    start = Snapshot(at_s=10.0, requests=100, failures=1, response_times={1: 60, 2: 40}, cpu_s=5.0)
    end = Snapshot(at_s=12.0, requests=300, failures=3, response_times={1: 60, 2: 140, 10: 90, 50: 10}, cpu_s=7.0)
    figures = figures_between(start, end, index=0, name="step 1", users=4, origin_s=9.0)
    assert (figures.requests, figures.failures, figures.rps) == (200, 2, 100.0)
    assert (figures.p50_ms, figures.p90_ms, figures.p95_ms, figures.p99_ms) == (2.0, 10.0, 10.0, 50.0)
    assert figures.server_cpu_cores == 1.0 and figures.rps_per_core == 100.0
    assert figures.started_s == 1.0 and figures.error_rate == 0.01


def test_percentile_of_an_empty_histogram_is_none():
    assert percentile({}, 0.95) is None
    assert percentile({5: 1}, 0.5) == 5.0


def test_saturation_follows_the_five_percent_rule_over_the_last_steps():
    growing = [step(0, 1, 100), step(1, 2, 190), step(2, 4, 350)]
    assert not is_saturated(growing, window=3, min_gain=0.05)
    flat = growing + [step(3, 8, 360), step(4, 16, 362)]
    assert is_saturated(flat, window=3, min_gain=0.05)  # 362 / 350 - 1 = 3.4%
    point = saturation_point(flat, window=3, min_gain=0.05)
    # The least load within 5% of the best throughput: 4 users already give 350 of 362 req/s.
    assert point.saturated and point.users == 4 and point.rps == 350 and point.best_rps == 362
    assert "3.4%" in point.reason


def test_no_saturation_claimed_while_throughput_still_grows():
    point = saturation_point([step(0, 1, 100), step(1, 2, 200)], window=3, min_gain=0.05)
    assert not point.saturated and "raise max users" in point.reason


def test_step_planner_doubles_users_until_saturation():
    spec = ShapeSpec(kind="step", users=1, max_users=64, step_s=2)
    planner = StagePlanner(spec)
    done = []
    for rps in (100, 200, 400, 410, 412):
        stage = planner.next_stage(done)
        assert stage is not None
        done.append(step(len(done), stage.users, rps))
    assert [s.users for s in done] == [1, 2, 4, 8, 16]
    assert planner.next_stage(done) is None and planner.stop_reason.startswith("saturated")


def test_step_planner_stops_at_max_users_and_on_a_broken_slo():
    planner = StagePlanner(ShapeSpec(kind="step", users=2, max_users=5, step_s=2))
    assert ShapeSpec(kind="step", users=2, max_users=5).step_users() == [2, 4, 5]
    done = [step(0, 2, 100), step(1, 4, 200), step(2, 5, 300)]
    assert planner.next_stage(done) is None and planner.stop_reason == "reached max users (5)"

    planner = StagePlanner(ShapeSpec(kind="step", users=1, step_s=2, stop_slo=Slo(p95_ms=20)))
    assert planner.next_stage([step(0, 1, 100, p95=5)]).users == 2
    assert planner.next_stage([step(0, 1, 100, p95=5), step(1, 2, 180, p95=25)]) is None
    assert "broke the SLO" in planner.stop_reason and "p95" in planner.stop_reason


def test_planner_stops_when_the_server_fails_or_goes_silent():
    planner = StagePlanner(ShapeSpec(kind="constant"))
    assert planner.next_stage([step(0, 4, 0, requests=0)]) is None
    assert "no request" in planner.stop_reason
    assert planner.next_stage([step(0, 4, 10, failures=600)]) is None
    assert "failed 60%" in planner.stop_reason


def test_spike_and_soak_stages():
    spike = ShapeSpec(kind="spike", users=2, spike_users=10, duration_s=12, spike_s=4).fixed_stages()
    assert [(s.name, s.users, s.duration_s) for s in spike] == [("baseline", 2, 4), ("spike", 10, 4), ("recovery", 2, 4)]
    soak = ShapeSpec(kind="soak", users=3, duration_s=25, window_s=10).fixed_stages()
    assert [s.duration_s for s in soak] == [10, 10, 5] and {s.users for s in soak} == {3}
    assert ShapeSpec(kind="spike", users=3, duration_s=9).fixed_stages()[1].users == 12  # 4x by default
    assert ShapeSpec(kind="step", users=1, max_users=8, step_s=3).planned_max_s() == 12


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"kind": "spike", "duration_s": 5, "spike_s": 6}, "must be shorter than the run"),
        ({"kind": "step", "users": 10, "max_users": 4}, "above max_users 4"),
        ({"kind": "zigzag"}, "kind"),
        ({"kind": "constant", "users": 0}, "users"),
        ({"kind": "step", "step_s": 1}, "too short to measure"),
        ({"kind": "spike", "duration_s": 4}, "too short to measure"),
    ],
)
def test_bad_shapes_are_one_line_errors(settings, message):
    with pytest.raises(ConfigError, match=message) as caught:
        build_shape(**settings)
    assert "\n" not in str(caught.value)


def test_hosts_with_seldon_ingress_prefix():
    rest = parse_host("https://ingress.example.com/seldon/prod/digits/", protocol="rest", model="digits", version="3")
    assert rest.base_url == "https://ingress.example.com" and rest.tls
    assert rest.infer_path == "/seldon/prod/digits/v2/models/digits/versions/3/infer"
    grpc = parse_host("grpc://ingress:8003/seldon/prod/digits", protocol="grpc", model="digits")
    assert grpc.base_url == "ingress:8003" and grpc.grpc_metadata == [("seldon", "digits"), ("namespace", "prod")]
    plain = parse_host("127.0.0.1:9000", protocol="rest", model="m")
    assert plain.base_url == "http://127.0.0.1:9000" and plain.infer_path == "/v2/models/m/infer" and not plain.grpc_metadata


@pytest.mark.parametrize(
    "host, protocol, message",
    [
        ("http://h:1/v2/models/x", "rest", "only path accepted is Seldon's ingress prefix"),
        ("ftp://h:1", "rest", "scheme 'ftp'"),
        ("http://:80", "rest", "names no machine"),
        ("http://h:99999", "rest", "invalid port"),
    ],
)
def test_bad_hosts_say_what_to_send(host, protocol, message):
    with pytest.raises(ConfigError, match=message):
        parse_host(host, protocol=protocol, model="m")


def test_soak_findings_range_over_the_windows_that_measured_a_p95():
    from loadtest.report import shape_findings
    from loadtest.run import LoadResult, LoadRun

    aggregate = LoadResult(users=3, duration_s=12, requests=3000, failures=0, rps=250, p50_ms=4, p95_ms=9, p99_ms=20, avg_ms=5)
    windows = [step(0, 3, 100, p95=8.0), step(1, 3, 100, p95=12.0), step(2, 3, 100, p95=10.0)]
    run = LoadRun(aggregate=aggregate, steps=windows, stopped="all stages ran", saturation=None)
    findings = shape_findings("soak", run)
    assert findings["p95_ms_range"] == [8.0, 12.0] and findings["p95_drift"] == 1.25
    # A window whose histogram counted nothing has no p95: the range is over the others, and None without any.
    unmeasured = dataclasses.replace(windows[1], p95_ms=None)
    assert shape_findings("soak", dataclasses.replace(run, steps=[windows[0], unmeasured, windows[2]]))["p95_ms_range"] == [
        8.0,
        10.0,
    ]
    none = [dataclasses.replace(window, p95_ms=None) for window in windows]
    assert shape_findings("soak", dataclasses.replace(run, steps=none))["p95_ms_range"] is None
