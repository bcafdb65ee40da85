"""`python -m deployments alerts`, run as a user runs it: what it writes passes `promtool check rules`, and an SLO
file it cannot use is one line and exit 2, with nothing written."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.conftest import run_module


def _one_line_error(result) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_alerts_writes_a_prometheus_rule_and_a_rule_file_that_promtool_accepts(prometheus_tools, tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("p99_ms: 20\nmax_error_rate: 0.001\nmin_rps: 2\ncanary:\n  min_requests: 50\n")
    out = tmp_path / "alerts"
    result = run_module(
        "deployments", "alerts", "--slo", str(slo), "--namespace", "ml", "--model", "mnist", "--out", str(out), timeout=120
    )
    said = "6 alerts and 7 recording rules for mnist in namespace ml from p99_ms, max_error_rate, min_rps"
    assert said in result.stderr
    rule = yaml.safe_load((out / "prometheusrule-mnist-slo.yaml").read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["name"] == "mnist-slo" and rule["metadata"]["namespace"] == "ml"
    assert rule["metadata"]["labels"]["slipway.io/model"] == "mnist"
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "slipway"  # undeploy removes it
    plain = out / "rules-mnist-slo.yaml"
    assert yaml.safe_load(plain.read_text()) == rule["spec"]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(rule["spec"]))
    for path in (plain, spec):
        checked = subprocess.run(
            [str(prometheus_tools["promtool"]), "check", "rules", "--lint=all", "--lint-fatal", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "SUCCESS: 13 rules found" in checked.stdout
    expressions = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    assert all('namespace="ml",slipway_io_model="mnist"' in expr for expr in expressions)


@pytest.mark.parametrize(
    "text, said",
    [
        ("p95: 50\n", "invalid SLO in {slo}: p95: Extra inputs are not permitted"),
        ("p95_ms: -3\n", "p95_ms: Input should be greater than 0"),
        (
            "canary:\n  min_requests: 50\n",
            "SLO file {slo} has none of the lines alerts are made from (p50_ms, p95_ms, p99_ms, max_error_rate, min_rps)",
        ),
        ("", "SLO file {slo} has none of the lines alerts are made from"),
        ("- p95_ms\n", "SLO file {slo} must be a mapping of limits"),
    ],
)
def test_an_slo_file_alerts_cannot_be_made_from_is_one_line_and_exit_2(tmp_path, text, said):
    slo = tmp_path / "slo.yaml"
    slo.write_text(text)
    out = tmp_path / "alerts"
    result = run_module("deployments", "alerts", "--slo", str(slo), "--out", str(out), check=False, timeout=120)
    assert said.format(slo=slo) in _one_line_error(result)
    assert not out.exists()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--model", "Digits_v2"], "model 'Digits_v2' cannot name a SeldonDeployment"),
        (["--namespace", "ML"], "namespace 'ML' is not a DNS-1123 label"),
        (["--model", "mnist", "--latency-histogram", "rest server"], "latency histogram 'rest server' is not a metric name"),
    ],
)
def test_a_model_namespace_or_histogram_prometheus_cannot_select_is_one_line(tmp_path, args, said):
    slo = tmp_path / "slo.yaml"
    slo.write_text("p95_ms: 50\n")
    result = run_module(
        "deployments", "alerts", "--slo", str(slo), "--out", str(tmp_path / "alerts"), *args, check=False, timeout=120
    )
    assert said in _one_line_error(result)


def test_an_out_that_is_a_file_is_refused_and_left_alone(tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("p95_ms: 50\n")
    out = tmp_path / "taken"
    out.write_text("mine\n")
    result = run_module("deployments", "alerts", "--slo", str(slo), "--out", str(out), check=False, timeout=120)
    assert f"{out} is a file" in _one_line_error(result)
    assert out.read_text() == "mine\n"
