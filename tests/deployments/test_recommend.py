"""`deployments recommend` on synthetic histories with known answers, and on inputs it must refuse."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from deployments.sizing.recommend.sizing import DecayingHistogram, recommend
from deployments.sizing.usage import UsageError, check_same_pods, parse_query_range
from slipway.paths import PROJECT_ROOT
from tests.commands import run_command
from tests.conftest import json_http_server
from tests.deployments.traces import DAY_S, MIB, START, diurnal, matrix, times, write

PODS = ("digits-a", "digits-b")


def usage(kind, series):
    return parse_query_range(matrix(series), kind=kind, source=kind)


def history(cpu, memory, rps, days=2.0):
    """Usage for two pods: each function maps timestamps to a per-pod value."""
    stamps = times(days)
    return (
        usage("cpu", {pod: (stamps, cpu(stamps)) for pod in PODS}),
        usage("memory", {pod: (stamps, memory(stamps)) for pod in PODS}),
        usage("rps", {pod: (stamps, rps(stamps)) for pod in PODS}),
    )


def flat(value):
    return lambda stamps: np.full(stamps.shape, float(value))


def test_flat_usage_gives_usage_plus_margin():
    rec = recommend(*history(flat(0.5), flat(300 * MIB), flat(50)), capacity_rps=50)
    # CPU comes from 5%-wide histogram buckets: usage x 1.15, rounded up by at most one bucket.
    assert 0.5 * 1.15 <= rec.cpu_request <= 0.5 * 1.15 * 1.05
    assert rec.cpu_limit == rec.cpu_request
    assert rec.memory_request == rec.memory_limit == pytest.approx(300 * MIB * 1.15)
    # 100 req/s in total, 50 per replica at the SLO, run at 70%: 35 each.
    assert (rec.min_replicas, rec.max_replicas) == (math_ceil(100 / 35), math_ceil(100 * 1.15 / 35)) == (3, 4)


def math_ceil(value):
    import math

    return math.ceil(value)


def test_diurnal_usage_sizes_cpu_at_the_daily_high_percentile_and_replicas_from_trough_and_peak():
    rec = recommend(
        *history(lambda t: diurnal(t, 0.1, 0.5), lambda t: diurnal(t, 200 * MIB, 400 * MIB), lambda t: diurnal(t, 10, 50)),
        capacity_rps=50,
    )
    # p90 of a sine between 0.1 and 0.5 is 0.1 + 0.4 * (0.5 + 0.5 * sin(0.4 pi)) = 0.490.
    p90 = 0.1 + 0.4 * (0.5 + 0.5 * np.sin(0.4 * np.pi))
    assert p90 * 1.15 <= rec.cpu_request <= p90 * 1.15 * 1.06
    assert rec.memory_limit == pytest.approx(400 * MIB * 1.15, rel=1e-3)
    assert (rec.min_replicas, rec.max_replicas) == (1, math_ceil(100 * 1.15 / 35))


def test_spikes_do_not_set_the_cpu_request_but_memory_peaks_set_its_limit():
    def cpu(stamps):
        values = np.full(stamps.shape, 0.2)
        values[::250] = 2.0  # 0.4% of the samples
        return values

    def memory(stamps):
        values = np.full(stamps.shape, 250 * MIB)
        values[100] = 900 * MIB  # one spike, a week ago
        return values

    rec = recommend(*history(cpu, memory, flat(20), days=7), capacity_rps=50)
    assert rec.cpu_request <= 0.2 * 1.15 * 1.05
    # The old spike is a peak: the limit covers it; the request follows the recent daily peaks.
    assert rec.memory_limit == pytest.approx(900 * MIB * 1.15)
    assert rec.memory_request == pytest.approx(250 * MIB * 1.15)


def test_growing_usage_weighs_recent_samples_more():
    days = 7.0
    grow = lambda low, high: lambda t: low + (high - low) * (t - START) / (days * DAY_S)  # noqa: E731
    cpu, memory, rps = history(grow(0.1, 1.0), grow(100 * MIB, 200 * MIB), grow(5, 50), days=days)
    rec = recommend(cpu, memory, rps, capacity_rps=50)
    unweighted_p90 = float(np.quantile(cpu.samples()[1], 0.9))
    assert unweighted_p90 * 1.15 < rec.cpu_request <= 1.0 * 1.15 * 1.05
    assert any("traffic grew" in line for line in rec.reasoning)


def test_decaying_histogram_halves_weights_every_half_life():
    histogram = DecayingHistogram(half_life_s=3600)
    stamps = np.array([0.0, 3600.0 * 10])
    values = np.array([1.0, 0.1])
    # The old sample weighs 2**-10 of the new one: the median is the new sample's bucket.
    assert histogram.percentile(stamps, values, 0.5, reference=stamps[-1]) == pytest.approx(0.1, rel=0.05)


def test_cpu_hpa_gets_a_coupling_warning_and_a_derived_utilization_target():
    rec = recommend(*history(flat(0.5), flat(300 * MIB), flat(50)), capacity_rps=50)
    assert any("VPA" in warning and "averageUtilization" in warning for warning in rec.warnings)
    # 0.01 cores per request x 35 req/s = 0.35 cores, of a ~0.59-core request.
    (metric,) = rec.hpa["metricsv2"]  # the model container's CPU alone: a memory target would hold replicas up
    assert (metric["type"], metric["containerResource"]["name"]) == ("ContainerResource", "cpu")
    assert metric["containerResource"]["container"] == "$(MODEL_CONTAINER)"  # the model container, named at render time
    assert metric["containerResource"]["target"]["averageUtilization"] == round(100 * 0.35 / rec.cpu_request)
    assert any("no memory target" in line for line in rec.reasoning)
    rps = recommend(*history(flat(0.5), flat(300 * MIB), flat(50)), capacity_rps=50, hpa_metric="rps", rps_metric="infer_rps")
    assert not rps.warnings and rps.hpa["metricsv2"][0]["pods"]["target"]["averageValue"] == "35"


def test_recommend_command_writes_report_overlay_and_plot(tmp_path, reports_env):
    stamps = times(1)
    files = {
        "cpu": write(tmp_path, "cpu", matrix({pod: (stamps, np.full(stamps.shape, 0.4)) for pod in PODS})),
        "memory": write(tmp_path, "memory", matrix({pod: (stamps, np.full(stamps.shape, 200.0 * MIB)) for pod in PODS})),
        "rps": write(tmp_path, "rps", matrix({"": (stamps, diurnal(stamps, 20, 120))})),  # one total series
    }
    result = _recommend_cli(
        tmp_path,
        reports_env,
        *[arg for kind, path in files.items() for arg in (f"--{kind}", str(path))],
        "--capacity-rps",
        "40",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    for key in ("cpu_request", "cpu_limit", "memory_request", "memory_limit", "min_replicas", "max_replicas", "reasoning"):
        assert report[key] == printed[key]
    assert (report["min_replicas"], report["max_replicas"]) == (1, math_ceil(120 * 1.15 / 28))
    ops = yaml.safe_load((tmp_path / "out" / "overlay" / "patch.yaml").read_text())
    assert {op["path"].rsplit("/", 1)[-1] for op in ops} == {"resources", "minReplicas", "maxReplicas", "metricsv2"}
    assert (tmp_path / "reports" / "recommend.png").read_bytes().startswith(b"\x89PNG")


def _recommend_cli(tmp_path, reports_env, *args):
    env = {key: value for key, value in __import__("os").environ.items() if key != "PROMETHEUS_URL"}
    env.update({**reports_env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")})
    command = ("deployments", "recommend", "--model", "digits", *args, "--out-dir", str(tmp_path / "out"))  # no cluster to ask
    return run_command(*command, cwd=PROJECT_ROOT, env=env, timeout=120)


def _good(stamps):
    return {
        "cpu": matrix({pod: (stamps, np.full(stamps.shape, 0.3)) for pod in PODS}),
        "memory": matrix({pod: (stamps, np.full(stamps.shape, 100.0 * MIB)) for pod in PODS}),
        "rps": matrix({pod: (stamps, np.full(stamps.shape, 10.0)) for pod in PODS}),
    }


def _with_gap(data):
    data["data"]["result"][0]["values"] = data["data"]["result"][0]["values"][:50] + data["data"]["result"][0]["values"][70:]
    return data


BAD = {
    "empty series": (
        "cpu",
        lambda d: {"status": "success", "data": {"resultType": "matrix", "result": []}},
        "has no samples: the query matched no series",
    ),
    "gap": ("memory", _with_gap, "has a gap of 1.8 h"),
    "millicores": ("cpu", lambda d: json.loads(json.dumps(d).replace('"0.3"', '"300"')), "look like millicores"),
    "MiB for bytes": ("memory", lambda d: json.loads(json.dumps(d).replace(f'"{100 * MIB:.6g}"', '"100"')), "must be in bytes"),
    "raw counter": (
        "cpu",
        lambda d: {
            **d,
            "data": {
                **d["data"],
                "result": [
                    {**r, "metric": {**r["metric"], "__name__": "container_cpu_usage_seconds_total"}} for r in d["data"]["result"]
                ],
            },
        },
        "is a raw counter",
    ),
    "instant query": (
        "rps",
        lambda d: {"status": "success", "data": {"resultType": "vector", "result": []}},
        "not an instant query",
    ),
    "mismatched pods": (
        "memory",
        lambda d: json.loads(json.dumps(d).replace("digits-b", "digits-c")),
        "cpu and memory describe different pods",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_histories_are_one_clear_error(tmp_path, reports_env, case):
    kind, spoil, message = BAD[case]
    data = _good(times(1))
    data[kind] = spoil(data[kind])
    args = [arg for name, body in data.items() for arg in (f"--{name}", str(write(tmp_path, name, body)))]
    result = _recommend_cli(tmp_path, reports_env, *args, "--capacity-rps", "40")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 3  # one line, wrapped by the terminal at most
    assert not (tmp_path / "reports" / "recommend.json").exists()


def test_missing_capacity_and_missing_files_say_what_to_give(tmp_path, reports_env):
    args = [arg for name, body in _good(times(1)).items() for arg in (f"--{name}", str(write(tmp_path, name, body)))]
    result = _recommend_cli(tmp_path, reports_env, *args)
    assert result.returncode == 2 and "run `make tune`" in result.stderr and "--capacity-rps" in result.stderr
    result = _recommend_cli(tmp_path, reports_env, "--cpu", args[1])
    assert result.returncode == 2 and "--memory, --rps missing" in result.stderr


def test_one_unlabelled_total_is_accepted_but_per_pod_rps_must_match():
    stamps = times(1)
    cpu = usage("cpu", {pod: (stamps, np.full(stamps.shape, 0.3)) for pod in PODS})
    memory = usage("memory", {pod: (stamps, np.full(stamps.shape, 100.0 * MIB)) for pod in PODS})
    check_same_pods(cpu, memory, usage("rps", {"": (stamps, np.full(stamps.shape, 10.0))}))
    with pytest.raises(UsageError, match="requests/s series name pods"):
        check_same_pods(cpu, memory, usage("rps", {"x": (stamps, stamps * 0), "y": (stamps, stamps * 0)}))


def test_histories_are_fetched_from_prometheus_url(tmp_path, reports_env):
    import urllib.parse

    stamps = times(1)
    answers = {
        "container_cpu_usage_seconds_total": _good(stamps)["cpu"],
        "container_memory_working_set_bytes": _good(stamps)["memory"],
        "model_infer_request_success_total": _good(stamps)["rps"],
    }
    asked = []

    def prometheus(path: str) -> object:
        url = urllib.parse.urlsplit(path)
        params = urllib.parse.parse_qs(url.query)
        asked.append((url.path, params))
        nothing = {"status": "success", "data": {"resultType": "matrix", "result": []}}  # the DCGM queries: no GPUs
        return next((data for name, data in answers.items() if name in params["query"][0]), nothing)

    with json_http_server(prometheus) as env_url:
        result = _recommend_cli(
            tmp_path,
            {**reports_env, "PROMETHEUS_URL": env_url},
            "--capacity-rps",
            "40",
            "--namespace",
            "prod",
            "--model",
            "digits",
            "--range",
            "1d",
            "--step",
            "5m",
        )
    assert result.returncode == 0, result.stderr
    assert [path for path, _ in asked] == ["/api/v1/query_range"] * 5  # cpu, memory, rps, GPU utilisation, GPU memory
    assert all('namespace="prod"' in params["query"][0] and params["step"] == ["300"] for _, params in asked)
    report = json.loads((tmp_path / "reports" / "recommend.json").read_text())
    assert report["inputs"]["cpu"]["pods"] == list(PODS) and report["cpu_request"] > 0.3


@pytest.mark.parametrize(
    "result",
    [{"a": 1}, [1, 2], [{"metric": "x", "values": [[1, "1"], [2, "1"]]}]],
    ids=["result a dict", "result of numbers", "metric a string"],
)
def test_a_query_range_of_the_wrong_shape_is_one_clear_error(result):
    data = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    with pytest.raises(UsageError, match=r"cpu: data.result must be a list of series .*; send the JSON of /api/v1/query_range"):
        parse_query_range(data, kind="cpu", source="cpu")


@pytest.mark.parametrize("capacity", ["nan", "inf", "0", "-5"])
def test_a_capacity_that_is_not_a_finite_positive_number_says_so(tmp_path, reports_env, capacity):
    args = [arg for name, body in _good(times(1)).items() for arg in (f"--{name}", str(write(tmp_path, name, body)))]
    result = _recommend_cli(tmp_path, reports_env, *args, "--capacity-rps", capacity)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    line = " ".join(result.stderr.split())
    assert f"--capacity-rps gives a per-replica capacity of {float(capacity)!r}: it must be a finite number" in line
    assert "make tune" not in line


@pytest.mark.parametrize("deployment", ["[1]", '{"per_replica_capacity_rps": "fast"}', '{"per_replica_capacity_rps": -1}'])
def test_a_tune_report_without_a_usable_capacity_is_one_line(tmp_path, reports_env, deployment):
    args = [arg for name, body in _good(times(1)).items() for arg in (f"--{name}", str(write(tmp_path, name, body)))]
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "tune.json").write_text(f'{{"deployment": {deployment}}}')
    result = _recommend_cli(tmp_path, reports_env, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "tune.json gives deployment.per_replica_capacity_rps" in " ".join(result.stderr.split())


def test_an_out_dir_that_is_a_file_and_a_history_that_is_a_folder_are_named(tmp_path, reports_env):
    files = {name: write(tmp_path, name, body) for name, body in _good(times(1)).items()}
    args = [arg for name, path in files.items() for arg in (f"--{name}", str(path))]
    (tmp_path / "out").write_text("")  # _recommend_cli's --out-dir
    result = _recommend_cli(tmp_path, reports_env, *args, "--capacity-rps", "40")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--out-dir {tmp_path / 'out'}: {tmp_path / 'out'} is a file" in " ".join(result.stderr.split())
    assert not (tmp_path / "reports" / "recommend.json").exists()
    (tmp_path / "out").unlink()
    result = _recommend_cli(tmp_path, reports_env, "--cpu", str(tmp_path), *args[2:], "--capacity-rps", "40")
    assert result.returncode == 2 and f"{tmp_path} is a folder, not a file" in " ".join(result.stderr.split())
