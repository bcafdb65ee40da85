"""The canary's pieces that need no Prometheus: the PromQL it sends, the credentials' headers, and the SLO file's
`canary:` section (a key it does not know is refused in one line)."""

from __future__ import annotations

import pytest

from deployments.delivery.canary.queries import PredictorQueries
from deployments.sizing.prometheus import Prometheus, PrometheusError
from loadtest.config import ConfigError
from slipway.slo import load_slo


def test_the_queries_select_by_the_labels_a_podmonitor_scrape_gives():
    queries = PredictorQueries("prod", "digits", "canary", "5m")
    assert queries.selector == 'namespace="prod",slipway_io_model="digits",slipway_io_predictor="canary"'
    # judged on the whole request by default (every protocol's series added up), the run's histogram beside it
    assert queries.latency(0.95) == (
        "histogram_quantile(0.95, sum by (le) (rate(slipway_request_seconds_bucket"
        '{namespace="prod",slipway_io_model="digits",slipway_io_predictor="canary"}[5m])))'
    )
    assert queries.latency(0.5, "slipway_inference_seconds") == (
        "histogram_quantile(0.5, sum by (le) (rate(slipway_inference_seconds_bucket"
        '{namespace="prod",slipway_io_model="digits",slipway_io_predictor="canary"}[5m])))'
    )
    with pytest.raises(ValueError, match="window '5 minutes' must be a whole number"):
        PredictorQueries("prod", "digits", "canary", "5 minutes")


def test_the_headers_each_credential_sends():
    assert Prometheus("http://p:9090", token="abc").headers() == {"Authorization": "Bearer abc"}
    assert Prometheus("http://p:9090", username="u", password="p").headers() == {"Authorization": "Basic dTpw"}
    assert Prometheus("http://p:9090").headers() == {}
    with pytest.raises(PrometheusError, match="both a bearer token and basic auth"):
        Prometheus.from_env(
            env={
                "PROMETHEUS_URL": "http://p:9090",
                "PROMETHEUS_TOKEN": "t",
                "PROMETHEUS_USERNAME": "u",
                "PROMETHEUS_PASSWORD": "p",
            }
        )
    with pytest.raises(PrometheusError, match="needs both PROMETHEUS_USERNAME and PROMETHEUS_PASSWORD"):
        Prometheus.from_env(env={"PROMETHEUS_URL": "http://p:9090", "PROMETHEUS_USERNAME": "u"})
    with pytest.raises(PrometheusError, match="set PROMETHEUS_URL"):
        Prometheus.from_env(env={})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("p95_ms: 25\ncanary:\n  min_request: 50\n", "canary.min_request: Extra inputs are not permitted"),
        ("p95: 25\n", "p95: Extra inputs are not permitted"),
        ("canary:\n  latency_tolerance: -1\n", "canary.latency_tolerance: Input should be greater than or equal to 0"),
    ],
)
def test_an_slo_file_with_a_key_it_does_not_know_is_refused_in_one_line(tmp_path, text, said):
    path = tmp_path / "slo.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_slo(path)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"invalid SLO in {path}: {said}"), message


def test_the_example_slo_file_holds_a_canary_section():
    from slipway.paths import PROJECT_ROOT

    slo = load_slo(PROJECT_ROOT / "loadtest" / "slo.example.yaml")
    assert slo.canary is not None and slo.canary.min_requests == 200 and not slo.is_empty()
