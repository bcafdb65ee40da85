"""The canary judge against a real Prometheus serving recorded series (series.py): a healthy canary steps, a
slow one fails on p95, an erroring one on the error rate, a starved one waits; credentials from the
environment reach the server."""

from __future__ import annotations

import re

import pytest

from deployments.delivery.canary.judge import judge
from deployments.sizing.prometheus import Prometheus, PrometheusError
from slipway.slo import load_slo
from tests.deployments.canary.series import CANARY, DEPLOYMENT, NAMESPACE_OF, STABLE, serving

pytestmark = pytest.mark.slow

SLO = """\
p50_ms: 20
p95_ms: 25
max_error_rate: 0.01
canary:
  min_requests: 200
"""


@pytest.fixture(scope="module")
def slo(tmp_path_factory):
    path = tmp_path_factory.mktemp("slo") / "slo.yaml"
    path.write_text(SLO)
    return load_slo(path)


def _judge(server: Prometheus, slo, recorded, scenario: str, **overrides):
    arguments = {
        "namespace": NAMESPACE_OF[scenario],
        "deployment": DEPLOYMENT,
        "stable": STABLE,
        "canary": CANARY,
        "window": "5m",
        "at": recorded.end,
    }
    return judge(server, slo, **{**arguments, **overrides})


def test_a_healthy_canary_steps_up(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "healthy")
    assert verdict.decision == "promote-step", verdict.lines()
    # 5 minutes of 2 req/s on the canary's pod, 2 x 10 req/s on the stable's (increase() extrapolates a little)
    assert 590 <= verdict.canary.requests <= 610 and 5900 <= verdict.stable.requests <= 6100
    assert verdict.canary.failures == verdict.stable.failures == 0  # no failure series at all: none failed
    for line in ("p50_ms", "p95_ms", "p99_ms"):
        assert 2.5 < verdict.canary.latency_ms[line] < 12 and 2.5 < verdict.stable.latency_ms[line] < 12
    assert verdict.lines()[0].startswith("canary canary holds the SLO")


def test_a_slow_canary_fails_naming_the_p95_line(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "slow")
    assert verdict.decision == "fail"
    assert {failure.line for failure in verdict.failures} == {"p95_ms"}  # p50 holds; p99 is not in this SLO
    against = {failure.against: failure for failure in verdict.failures}
    assert set(against) == {"slo", "stable"}
    assert 30 < against["slo"].canary < 50 and against["slo"].limit == 25 and against["slo"].stable < 10
    assert against["stable"].limit == pytest.approx(max(against["stable"].stable * 1.2, against["stable"].stable + 1))
    assert re.fullmatch(
        r"p95_ms: canary p95 \d+\.\d\d ms vs stable \d\.\d\d ms; over the SLO limit 25\.00 ms "
        r"\(ONNX Runtime's run alone: canary \d+\.\d\d ms vs stable \d\.\d\d ms\)",
        verdict.lines()[0],
    ), verdict.lines()
    assert verdict.canary.run_latency_ms["p95_ms"] > 30  # slow in the run itself


def test_a_canary_slower_around_an_unchanged_run_fails_on_request_latency(prometheus_url, slo, recorded):
    """The whole request is judged by default: a canary whose ONNX Runtime run is the stable's but whose requests
    take longer around it fails, its run figure beside; judged on the run's histogram alone, it would pass."""
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "slow-outside")
    assert verdict.decision == "fail", verdict.lines()
    assert {failure.line for failure in verdict.failures} == {"p95_ms"}
    assert 30 < verdict.canary.latency_ms["p95_ms"] < 50
    assert all(2.5 < verdict.canary.run_latency_ms[line] < 12 for line in ("p50_ms", "p95_ms", "p99_ms"))
    assert all(2.5 < verdict.stable.run_latency_ms[line] < 12 for line in ("p50_ms", "p95_ms", "p99_ms"))
    run_alone = re.search(r"ONNX Runtime's run alone: canary (\d+\.\d\d) ms vs stable (\d+\.\d\d) ms", verdict.lines()[0])
    assert run_alone and float(run_alone[1]) < 12 and float(run_alone[2]) < 12, verdict.lines()
    on_the_run = _judge(Prometheus(prometheus_url), slo, recorded, "slow-outside", latency_histogram="slipway_inference_seconds")
    assert on_the_run.decision == "promote-step", on_the_run.lines()
    assert on_the_run.canary.run_latency_ms == {}  # the judged histogram is the run's: nothing beside it


def test_an_erroring_canary_fails_on_the_error_rate(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "erroring")
    assert verdict.decision == "fail"
    assert {failure.line for failure in verdict.failures} == {"max_error_rate"}
    assert verdict.canary.error_rate == pytest.approx(0.05, abs=0.005) and verdict.stable.error_rate == 0
    assert verdict.lines() == [
        f"max_error_rate: canary error rate {verdict.canary.error_rate:.2%} vs stable 0.00%; over the SLO limit 1.00%",
        (
            f"max_error_rate: canary error rate {verdict.canary.error_rate:.2%} vs stable 0.00%; over the stable's plus "
            "tolerance, 0.10%"
        ),
    ]


def test_too_few_canary_requests_waits_saying_how_many(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "sparse")
    assert verdict.decision == "wait" and not verdict.failures
    assert re.fullmatch(
        r"wait: canary canary served (5\d|6\d) requests in the last 5m; 200 needed per predictor "
        r"\(canary.min_requests\)",
        verdict.lines()[0],
    ), verdict.lines()


def test_a_canary_without_any_series_waits(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "healthy", canary="not-deployed-yet")
    assert verdict.decision == "wait" and verdict.canary.requests == 0
    assert "canary not-deployed-yet served 0 requests in the last 5m; 200 needed" in verdict.waiting_for


def test_a_window_shorter_than_the_recorded_range_judges_on_it_alone(prometheus_url, slo, recorded):
    verdict = _judge(Prometheus(prometheus_url), slo, recorded, "healthy", window="1m")
    assert verdict.decision == "wait" and 110 <= verdict.canary.requests <= 130  # 2 req/s over 1 minute
    assert "stable default" not in verdict.waiting_for  # 2 x 10 req/s: enough


@pytest.mark.parametrize(
    ("scenario", "status", "said"),
    [
        ("healthy", 0, "promote-step"),
        ("slow", 1, "p95_ms: canary p95"),
        ("sparse", 3, "wait: canary canary served"),
    ],
)
def test_the_command_exits_by_its_decision(prometheus_url, recorded, tmp_path, scenario, status, said):
    import json
    import os

    from slipway.paths import PROJECT_ROOT
    from tests.commands import run_command

    (tmp_path / "slo.yaml").write_text(SLO)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROMETHEUS_")}
    result = run_command(
        "deployments",
        "canary-judge",
        "--slo",
        str(tmp_path / "slo.yaml"),
        "--namespace",
        NAMESPACE_OF[scenario],
        "--deployment",
        DEPLOYMENT,
        "--at",
        str(recorded.end),
        "--json",
        cwd=PROJECT_ROOT,
        env={**env, "PROMETHEUS_URL": prometheus_url, "COLUMNS": "400"},
        timeout=120,
    )
    assert result.returncode == status, result.stderr
    assert said in result.stderr
    assert json.loads(result.stdout)["decision"] == {0: "promote-step", 1: "fail", 3: "wait"}[status]


# ---------------------------------------------------------------- credentials from the environment

USER, PASSWORD = "slipway", "s3cret-for-tests"


@pytest.fixture(scope="module")
def guarded_url(recorded, prometheus_tools, tmp_path_factory):
    """A second Prometheus over the same series that admits only basic auth (its --web.config.file)."""
    bcrypt = pytest.importorskip("bcrypt")
    import base64

    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=5)).decode()
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    with serving(
        prometheus_tools["prometheus"],
        recorded,
        tmp_path_factory.mktemp("guarded"),
        web_config=f"basic_auth_users:\n  {USER}: {hashed}\n",
        headers={"Authorization": f"Basic {pair}"},
    ) as url:
        yield url


def test_basic_auth_from_the_environment_reaches_prometheus(guarded_url, slo, recorded):
    server = Prometheus.from_env(
        env={"PROMETHEUS_URL": guarded_url, "PROMETHEUS_USERNAME": USER, "PROMETHEUS_PASSWORD": PASSWORD}
    )
    assert _judge(server, slo, recorded, "healthy").decision == "promote-step"
    assert PASSWORD not in repr(server)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({}, "refused no credentials (401)"),
        ({"PROMETHEUS_USERNAME": USER, "PROMETHEUS_PASSWORD": "wrong"}, "refused the credentials sent (401)"),
        ({"PROMETHEUS_TOKEN": "a-token"}, "refused the credentials sent (401)"),  # this server takes basic auth only
    ],
    ids=["none", "wrong password", "bearer token"],
)
def test_refused_credentials_are_one_line_naming_the_variables(guarded_url, slo, recorded, env, said):
    server = Prometheus.from_env(env={"PROMETHEUS_URL": guarded_url, **env})
    with pytest.raises(PrometheusError) as raised:
        _judge(server, slo, recorded, "healthy")
    assert str(raised.value) == (
        f"Prometheus at {guarded_url} {said}: set PROMETHEUS_TOKEN (a bearer token) or "
        "PROMETHEUS_USERNAME and PROMETHEUS_PASSWORD (basic auth)"
    )


def test_make_recommend_reads_through_the_same_credentials(guarded_url, recorded, monkeypatch):
    from deployments.sizing.usage import UsageError, fetch_usage

    query = f'sum by (pod) (rate(model_infer_request_success_total{{namespace="{NAMESPACE_OF["healthy"]}"}}[1m]))'
    window = {"kind": "rps", "start": recorded.end - 600, "end": recorded.end, "step_s": 15}
    for name in ("PROMETHEUS_TOKEN", "PROMETHEUS_USERNAME", "PROMETHEUS_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UsageError, match=r"^rps query: Prometheus at .* refused no credentials \(401\)"):
        fetch_usage(guarded_url, query, **window)
    monkeypatch.setenv("PROMETHEUS_USERNAME", USER)
    monkeypatch.setenv("PROMETHEUS_PASSWORD", PASSWORD)
    usage = fetch_usage(guarded_url, query, **window)
    assert len(usage.pods) == 3 and usage.step_s == 15
