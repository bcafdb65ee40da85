"""The SLO's alerts, checked by Prometheus' own promtool: `check rules` on what is rendered, and `test rules` on
recorded series that breach each line (the alert fires, with its labels, once its `for` has passed) and that hold
it (no alert). The series are labelled as the rendered PodMonitor's scrape labels them (queries.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from deployments.delivery.alerts.rules import (
    BURN_ALERT,
    LATENCY_ALERT,
    THROUGHPUT_ALERT,
    SloRules,
    error_ratio_record,
    prometheus_rule,
)
from slipway.slo import load_slo

NS, MODEL = "slipway", "digits"
SLO = {"p50_ms": 60, "p95_ms": 50, "p99_ms": 200, "max_error_rate": 0.01, "min_rps": 5, "canary": {"min_requests": 100}}
PREDICTOR_TEMPLATE = "{{ $labels.slipway_io_predictor }}"
VALUE_TEMPLATES = ('{{ printf "%.1f" $value }}', "{{ humanizePercentage $value }}", '{{ printf "%.2f" $value }}')
LE = ("0.001", "0.0025", "0.05", "0.1", "+Inf")


def _rules(tmp_path: Path, slo: dict) -> SloRules:
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(slo))
    return SloRules(load_slo(path), namespace=NS, model=MODEL)


def _promtool(prometheus_tools, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(prometheus_tools["promtool"]), *args], capture_output=True, text=True, timeout=120, check=False)


def _series(metric: str, values: str, predictor: str | None = None, *, model: str = MODEL, **extra: str) -> dict:
    """One series as MLServer's or the runtime's metrics port gives it, with the PodMonitor's scrape labels."""
    labels = {
        "namespace": NS,
        "slipway_io_model": model,
        "pod": f"{model}-{predictor or 'default'}-0-{model}-7c9d5",
        "container": model,
        "endpoint": "metrics",
        "model": model,
        "version": "3",
        **extra,
    }
    if predictor is not None:
        labels["slipway_io_predictor"] = predictor
    return {"series": metric + "{" + ",".join(f'{key}="{value}"' for key, value in labels.items()) + "}", "values": values}


def _requests(predictor: str | None, successes: str | None, failures: str | None, *, model: str = MODEL) -> list[dict]:
    """MLServer's counters; None: the counter has no series (never incremented)."""
    return ([_series("model_infer_request_success_total", successes, predictor, model=model)] if successes else []) + (
        [_series("model_infer_request_failure_total", failures, predictor, model=model)] if failures else []
    )


def _expected(rules: SloRules, alert: str, labels: dict[str, str], value: str, predictor: str | None = None) -> dict:
    """An alert as promtool must see it: the rule's labels plus the series', its annotations filled in as
    Prometheus's templates fill them for this predictor and this value."""
    rule = next(
        rule
        for group in rules.groups()
        for rule in group["rules"]
        if rule.get("alert") == alert and all(rule["labels"].get(k, v) == v for k, v in labels.items())
    )
    series = {"namespace": NS, "slipway_io_model": MODEL} | ({"slipway_io_predictor": predictor} if predictor else {})

    def filled(text: str) -> str:
        for template in VALUE_TEMPLATES:
            text = text.replace(template, value)
        return text.replace(PREDICTOR_TEMPLATE, predictor or "")

    return {
        "exp_labels": {**rule["labels"], **series},
        "exp_annotations": {key: filled(text) for key, text in rule["annotations"].items()},
    }


def _burn(rules: SloRules, predictor: str, long: str, value: str) -> dict:
    return _expected(rules, BURN_ALERT, {"long_window": long}, value, predictor)


def _run_unit_tests(prometheus_tools, tmp_path: Path, rules: SloRules, tests: list[dict]) -> None:
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(yaml.safe_dump(prometheus_rule(rules)["spec"], sort_keys=False))
    checked = _promtool(prometheus_tools, "check", "rules", "--lint=all", "--lint-fatal", str(rule_file))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    unit = tmp_path / "unit.yaml"
    unit.write_text(
        yaml.safe_dump({"rule_files": [rule_file.name], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    result = _promtool(prometheus_tools, "test", "rules", str(unit))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


def test_latency_lines_fire_per_predictor_after_their_for_and_hold_below_the_limit(prometheus_tools, tmp_path):
    rules = _rules(tmp_path, SLO)
    # default: every run between 50 and 100 ms (p50 75, p95 97.5, p99 99.5 ms); canary: between 1 and 2.5 ms
    slow = {"0.001": "0x30", "0.0025": "0x30", "0.05": "0x30", "0.1": "0+60x30", "+Inf": "0+60x30"}
    fast = {"0.001": "0x30", "0.0025": "0+60x30", "0.05": "0+60x30", "0.1": "0+60x30", "+Inf": "0+60x30"}
    series = [
        _series(
            "slipway_request_seconds_bucket", runs[le], predictor, le=le, model_name=MODEL, model_version="3", protocol="grpc"
        )
        for predictor, runs in (("default", slow), ("canary", fast))
        for le in LE
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": LATENCY_ALERT, "exp_alerts": []},  # pending: `for` is 10m
                {
                    "eval_time": "15m",
                    "alertname": LATENCY_ALERT,
                    "exp_alerts": [
                        _expected(rules, LATENCY_ALERT, {"slo": "p50_ms"}, "75.0", "default"),
                        _expected(rules, LATENCY_ALERT, {"slo": "p95_ms"}, "97.5", "default"),
                    ],
                },  # p99 (99.5 ms < 200) holds; the canary holds every line
            ],
        }
    ]
    _run_unit_tests(prometheus_tools, tmp_path, rules, tests)
    summary = _expected(rules, LATENCY_ALERT, {"slo": "p95_ms"}, "97.5", "default")["exp_annotations"]["summary"]
    assert summary == "digits/default: p95 latency 97.5 ms, above the SLO's p95_ms: 50"


def test_the_error_budget_pages_and_tickets_by_burn_rate_and_a_missing_counter_is_zero(prometheus_tools, tmp_path):
    rules = _rules(tmp_path, SLO)  # max_error_rate 0.01: page above 14.4x (1h) or 6x (6h), ticket above 3x or 1x
    series = [
        *_requests("paging", "0+48x90", "0+12x90"),  # 20% failed: every pair
        *_requests("ticketing", "0+96x90", "0+4x90"),  # 4%: above 3x and 1x, below 6x
        *_requests("holding", "0+199x90", "0+1x90"),  # 0.5%: within the budget
        *_requests("clean", "0+60x90", None),  # never failed: MLServer has no failure series for it
        *_requests("failing", None, "0+10x90"),  # never succeeded: no success series
    ]
    everything = (("paging", "20%"), ("failing", "100%"))
    record = error_ratio_record("5m")
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # 10m: the pages (for 2m) fire, the tickets (for 15m) are pending
                {
                    "eval_time": "10m",
                    "alertname": BURN_ALERT,
                    "exp_alerts": [
                        _burn(rules, predictor, long, value) for predictor, value in everything for long in ("1h", "6h")
                    ],
                },
                {
                    "eval_time": "70m",
                    "alertname": BURN_ALERT,
                    "exp_alerts": [
                        *(
                            _burn(rules, predictor, long, value)
                            for predictor, value in everything
                            for long in ("1h", "6h", "1d", "3d")
                        ),
                        _burn(rules, "ticketing", "1d", "4%"),
                        _burn(rules, "ticketing", "3d", "4%"),
                    ],
                },
            ],
            "promql_expr_test": [
                {
                    "eval_time": "70m",
                    "expr": f'{record}{{slipway_io_predictor="{predictor}"}}',
                    "exp_samples": [
                        {
                            "labels": f'{record}{{namespace="{NS}",slipway_io_model="{MODEL}",slipway_io_predictor="{predictor}"}}',
                            "value": value,
                        }
                    ],
                }
                for predictor, value in (("clean", 0), ("failing", 1), ("holding", 0.005))
            ],
        }
    ]
    _run_unit_tests(prometheus_tools, tmp_path, rules, tests)


def test_a_burst_of_errors_pages_once_the_long_window_holds_enough_and_stops_with_the_short_one(
    prometheus_tools,
    tmp_path,
):
    rules = _rules(tmp_path, SLO)
    # 1 success/s throughout; from 120m to 240m also 0.5 failures/s (a third of the requests), then none
    series = _requests("default", "0+60x300", "0x119 0+30x120 3600x60")
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # 10 minutes in: the 5m window is far over 14.4x, the 1h window not yet (7.7% < 14.4%): nothing fires
                {"eval_time": "130m", "alertname": BURN_ALERT, "exp_alerts": []},
                # the 1h window is all burst (a third failed); 6h, 1d and 3d hold everything since the start (a sixth)
                {
                    "eval_time": "200m",
                    "alertname": BURN_ALERT,
                    "exp_alerts": [
                        _burn(rules, "default", "1h", "33.33%"),
                        _burn(rules, "default", "6h", "16.67%"),
                        _burn(rules, "default", "1d", "16.67%"),
                        _burn(rules, "default", "3d", "16.67%"),
                    ],
                },
                # 10 minutes after the last failure: the 5m window is clean, so the fast page has ended; the 30m window
                # still holds failures, so the 6h page goes on, and the tickets
                {
                    "eval_time": "250m",
                    "alertname": BURN_ALERT,
                    "exp_alerts": [
                        _burn(rules, "default", "6h", "19.35%"),
                        _burn(rules, "default", "1d", "19.35%"),
                        _burn(rules, "default", "3d", "19.35%"),
                    ],
                },
            ],
        }
    ]
    _run_unit_tests(prometheus_tools, tmp_path, rules, tests)


def test_min_rps_counts_every_predictor_and_no_series_at_all_as_zero(prometheus_tools, tmp_path):
    rules = _rules(tmp_path, SLO)  # min_rps 5, for 15m

    def breach(value: str) -> dict:
        return _expected(rules, THROUGHPUT_ALERT, {}, value)

    tests = [
        # 3 requests/s on default (a tenth failed) and 2.5 on canary: each below 5, the model above it
        {
            "interval": "1m",
            "input_series": [*_requests("default", "0+162x30", "0+18x30"), *_requests("canary", "0+150x30", None)],
            "alert_rule_test": [{"eval_time": "20m", "alertname": THROUGHPUT_ALERT, "exp_alerts": []}],
        },
        {
            "interval": "1m",
            "input_series": _requests("default", "0+100x30", "0+20x30"),  # 2 requests/s
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": THROUGHPUT_ALERT, "exp_alerts": []},  # pending
                {"eval_time": "20m", "alertname": THROUGHPUT_ALERT, "exp_alerts": [breach("2.00")]},
            ],
        },
        # no pod of the model is scraped (another model's series do not count)
        {
            "interval": "1m",
            "input_series": _requests("default", "0+600x30", None, model="other"),
            "alert_rule_test": [{"eval_time": "20m", "alertname": THROUGHPUT_ALERT, "exp_alerts": [breach("0.00")]}],
        },
    ]
    _run_unit_tests(prometheus_tools, tmp_path, rules, tests)


@pytest.mark.parametrize(
    "slo, alerts, records",
    [
        ({"p95_ms": 50}, [(LATENCY_ALERT, "p95_ms")], 0),
        ({"max_error_rate": 0.001}, [(BURN_ALERT, "max_error_rate")] * 4, 7),
        ({"min_rps": 1, "canary": {"min_requests": 50}}, [(THROUGHPUT_ALERT, "min_rps")], 0),
    ],
)
def test_lines_absent_from_the_slo_make_no_rule(tmp_path, slo, alerts, records):
    groups = _rules(tmp_path, slo).groups()
    assert len(groups) == 1
    found = [(rule["alert"], rule["labels"]["slo"]) for rule in groups[0]["rules"] if "alert" in rule]
    assert found == alerts
    assert sum("record" in rule for rule in groups[0]["rules"]) == records
    assert all("record" in rule for rule in groups[0]["rules"][:records]), "records first: the alerts read them"
