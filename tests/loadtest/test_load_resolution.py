"""Sub-millisecond latencies read as such: Locust's histogram keys as the locustfiles install them, and
the step figures' percentiles over those keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from loadtest.config import JOB_ENV, LoadJob, ShapeSpec, parse_host
from loadtest.steps import Snapshot, bucket_ms, figures_between, percentile, percentiles
from slipway.paths import PROJECT_ROOT


def _whole_ms(response_time: float) -> float:
    """A stand-in for Locust's rounding that marks what it was handed, so delegation shows."""
    return 1000 + response_time


@pytest.mark.parametrize("response_time, key", [
    (0.4371, 0.44), (0.435, 0.43), (0.0528, 0.053), (0.000123456, 0.00012), (0.1, 0.1), (0.99, 0.99),
    (0.996, 1.0),  # rounds up into Locust's first whole-ms bucket, the same dict key as its 1
    (0.0, 0.0), (-0.001, 0.0),
])
def test_below_one_ms_a_response_time_keeps_two_significant_digits(response_time, key):
    assert bucket_ms(response_time, _whole_ms) == key


@pytest.mark.parametrize("response_time", [1.0, 1.4, 99.5, 147.0, 3432.0])
def test_from_one_ms_up_the_key_is_locusts_own(response_time):
    assert bucket_ms(response_time, _whole_ms) == 1000 + response_time


@pytest.mark.parametrize("locustfile", ["locustfile_rest", "locustfile_grpc"])
def test_the_locustfiles_install_the_bucketing_in_locust_and_keep_its_rounding_from_one_ms_up(locustfile, tmp_path):
    (tmp_path / "request.bin").write_bytes(b"")  # what each locustfile reads at import: an empty body, an empty request
    job = LoadJob(endpoint=parse_host("127.0.0.1:9", protocol="rest", model="mm"), payload_file=tmp_path / "request.bin",
                  shape=ShapeSpec(kind="constant", users=1, duration_s=2), steps_file=tmp_path / "steps.json")
    (tmp_path / "job.json").write_text(job.model_dump_json())
    # In a process of its own, as Locust loads it: importing locust monkey-patches the standard library for gevent.
    code = (f"import json, locust.stats, loadtest.{locustfile}; "
            "print(json.dumps([locust.stats.bucket_response_time(t) for t in "
            "(0.4371, 0.0528, 0.996, 1.4, 1.6, 99.4, 147, 3432, 58760)]))")
    env = {**os.environ, JOB_ENV: str(tmp_path / "job.json"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
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
