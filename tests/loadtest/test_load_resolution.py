"""Sub-millisecond latencies read as such: Locust's histogram keys as the locustfiles install them, the
run's percentiles taken from that histogram instead of the CSV's whole milliseconds, and one real
run against a loopback server that answers in well under 1 ms."""

from __future__ import annotations

import http.server
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.config import JOB_ENV, LoadJob, ShapeSpec, parse_host
from loadtest.run import LoadTestError, read_stats, read_steps
from loadtest.steps import Snapshot, bucket_ms, figures_between, percentile, percentiles
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module, send_body, serving

METADATA = {
    "name": "mm",
    "platform": "",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
}
V2_ANSWER = json.dumps(
    {"model_name": "mm", "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [0, 0, 1]}]}
).encode()


def _whole_ms(response_time: float) -> float:
    """A stand-in for Locust's rounding that marks what it was handed, so delegation shows."""
    return 1000 + response_time


@pytest.mark.parametrize(
    "response_time, key",
    [
        (0.4371, 0.44),
        (0.435, 0.43),
        (0.0528, 0.053),
        (0.000123456, 0.00012),
        (0.1, 0.1),
        (0.99, 0.99),
        (0.996, 1.0),  # rounds up into Locust's first whole-ms bucket, the same dict key as its 1
        (0.0, 0.0),
        (-0.001, 0.0),
    ],
)
def test_below_one_ms_a_response_time_keeps_two_significant_digits(response_time, key):
    assert bucket_ms(response_time, _whole_ms) == key


@pytest.mark.parametrize("response_time", [1.0, 1.4, 99.5, 147.0, 3432.0])
def test_from_one_ms_up_the_key_is_locusts_own(response_time):
    assert bucket_ms(response_time, _whole_ms) == 1000 + response_time


@pytest.mark.parametrize("locustfile", ["locustfile_rest", "locustfile_grpc"])
def test_the_locustfiles_install_the_bucketing_in_locust_and_keep_its_rounding_from_one_ms_up(locustfile, tmp_path):
    (tmp_path / "request.bin").write_bytes(b"")  # what each locustfile reads at import: an empty body, an empty request
    job = LoadJob(
        endpoint=parse_host("127.0.0.1:9", protocol="rest", model="mm"),
        payload_file=tmp_path / "request.bin",
        shape=ShapeSpec(kind="constant", users=1, duration_s=2),
        steps_file=tmp_path / "steps.json",
    )
    (tmp_path / "job.json").write_text(job.model_dump_json())
    # In a process of its own, as Locust loads it: importing locust monkey-patches the standard library for gevent.
    code = (
        f"import json, locust.stats, loadtest.{locustfile}; "
        "print(json.dumps([locust.stats.bucket_response_time(t) for t in "
        "(0.4371, 0.0528, 0.996, 1.4, 1.6, 99.4, 147, 3432, 58760)]))"
    )
    env = {
        **os.environ,
        JOB_ENV: str(tmp_path / "job.json"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [0.44, 0.053, 1.0, 1, 2, 99, 150, 3400, 59000]


def test_percentiles_of_a_sub_millisecond_histogram_are_fractions_of_a_millisecond():
    histogram = {0.21: 10, 0.3: 70, 0.44: 15, 0.9: 4, 12: 1}
    assert percentiles(histogram) == {"p50_ms": 0.3, "p90_ms": 0.44, "p95_ms": 0.44, "p99_ms": 0.9}
    assert percentile(histogram, 1.0) == 12.0


def test_a_steps_figures_keep_sub_millisecond_keys():
    start = Snapshot(at_s=0.0, requests=10, failures=0, response_times={0.3: 10})
    end = Snapshot(at_s=1.0, requests=110, failures=0, response_times={0.3: 40, 0.52: 50, 0.87: 10, 1: 10})
    figures = figures_between(start, end, index=0, name="constant", users=1)
    assert figures.requests == 100 and (figures.p50_ms, figures.p90_ms, figures.p99_ms) == (0.52, 0.87, 1.0)


CSV_HEADER = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
    "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
    "99.99%,100%\n"
)


def test_the_whole_runs_percentiles_come_from_its_histogram_not_the_csvs_whole_milliseconds(tmp_path):
    stats = tmp_path / "locust_stats.csv"
    stats.write_text(CSV_HEADER + ",Aggregated,100,1,0.3,0.35,0.2,7.3,104.0,50.0,0.5,0,0,0,0,0,0,0,0,7,7,7\n")
    result = read_stats(stats, users=1, response_times={0.2: 40, 0.3: 45, 0.6: 14, 7: 1})
    assert (result.p50_ms, result.p95_ms, result.p99_ms) == (0.3, 0.6, 0.6)
    assert (result.requests, result.failures, result.rps, result.avg_ms, result.duration_s) == (100, 1, 50.0, 0.35, 2.0)


def test_a_run_without_requests_has_no_percentiles(tmp_path):
    stats = tmp_path / "locust_stats.csv"
    stats.write_text(CSV_HEADER + ",Aggregated,0,0,0,0.0,0,0,0,0.0,0.0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A\n")
    result = read_stats(stats, users=1, response_times={})
    assert math.isnan(result.p50_ms) and math.isnan(result.p99_ms) and result.requests == 0


def test_steps_read_back_with_the_whole_runs_histogram_and_without_it_say_where_to_look(tmp_path):
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            {"final": True, "stopped": "all stages ran", "steps": [], "saturation": None, "response_times": [[0.23, 5], [1, 2]]}
        )
    )
    assert read_steps(steps)["response_times"] == {0.23: 5, 1.0: 2}
    steps.write_text(json.dumps({"final": True, "stopped": "all stages ran", "steps": [], "saturation": None}))
    with pytest.raises(LoadTestError, match=r"no whole-run histogram in .*steps.json: .* see locust.log"):
        read_steps(steps)


class _KeepAliveV2(http.server.BaseHTTPRequestHandler):
    """Describes METADATA on GET, answers every POST with one V2 answer; one connection per user, no Nagle wait."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_GET(self):  # noqa: N802 (http.server's naming)
        send_body(self, json.dumps(METADATA).encode())

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        send_body(self, V2_ANSWER)

    def log_message(self, *args):
        pass


def _sub_ms_server():
    """A kept-alive V2 stand-in answering in well under a millisecond: what Locust's reporting is checked against."""
    return serving(_KeepAliveV2)


@pytest.mark.slow
def test_a_sub_millisecond_server_reads_between_0_and_1_ms(reports_env, tmp_path):
    # One user on a kept-alive loopback connection: about 0.3 ms a request, which Locust's CSV writes as 0.
    with _sub_ms_server() as host:
        result = run_module(
            "loadtest",
            "run",
            "--host",
            host,
            "--model",
            "mm",
            "--users",
            "1",
            "--duration",
            "3",
            "--max-error-rate",
            "0",
            "--name",
            "sub-ms",
            "--out-dir",
            str(tmp_path / "locust"),
            env=reports_env,
            check=False,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    report = json.loads((Path(reports_env["SLIPWAY_REPORTS_DIR"]) / "sub-ms.json").read_text())
    whole, (step,) = report["result"], report["steps"]
    assert whole["requests"] > 100 and whole["failures"] == 0
    assert 0 < whole["p50_ms"] < 1 and whole["p50_ms"] <= whole["p95_ms"] <= whole["p99_ms"]
    assert 0 < step["p50_ms"] < 1 and step["p50_ms"] <= step["p90_ms"] <= step["p95_ms"] <= step["p99_ms"]
    assert f"p50 {whole['p50_ms']:g} ms," in " ".join(result.stderr.split())  # the summary line says it too
