"""The rendered PodMonitor as the scrape job prometheus-operator would write (localcluster/pod_monitor.py): promtool
accepts it, and a field the translation does not carry is refused in one line. The real-node canary test runs it
against live pods."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from localcluster.pod_monitor import UnsupportedPodMonitor, scrape_jobs
from slipway.paths import PROJECT_ROOT
from tests.deployments.canary.series import prometheus_tools  # noqa: F401 (a fixture: the Prometheus build)


def _pod_monitor() -> dict:
    monitor = yaml.safe_load((PROJECT_ROOT / "deployments" / "base" / "podmonitor.yaml").read_text())
    monitor["metadata"]["namespace"] = "slipway"
    return monitor


def test_the_rendered_pod_monitor_is_a_job_promtool_accepts(prometheus_tools, tmp_path):  # noqa: F811
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    (job,) = scrape_jobs(_pod_monitor(), kubeconfig, interval="1s")
    assert job["job_name"] == "podMonitor/slipway/digits-mlserver/0"
    assert job["metrics_path"] == "/prometheus" and job["scrape_interval"] == "1s"
    assert job["kubernetes_sd_configs"] == [
        {"role": "pod", "kubeconfig_file": str(kubeconfig), "namespaces": {"names": ["slipway"]}}
    ]
    keep = [rule for rule in job["relabel_configs"] if rule.get("action") == "keep"]
    assert [(rule["source_labels"][0], rule["regex"]) for rule in keep] == [
        ("__meta_kubernetes_pod_label_slipway_io_model", "(digits);true"),
        ("__meta_kubernetes_pod_container_port_name", "metrics"),
    ]
    targets = {rule["target_label"] for rule in job["relabel_configs"] if "target_label" in rule}
    assert targets == {"namespace", "container", "pod", "slipway_io_model", "slipway_io_predictor"}
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    checked = subprocess.run(
        [str(prometheus_tools["promtool"]), "check", "config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the endpoint's own interval where none is asked for
    assert scrape_jobs(_pod_monitor(), kubeconfig)[0]["scrape_interval"] == "15s"


def test_a_field_the_translation_does_not_carry_is_refused_in_one_line(tmp_path):
    monitor = _pod_monitor()
    monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] = [{"action": "drop"}]
    with pytest.raises(UnsupportedPodMonitor, match="uses relabelings: only") as refused:
        scrape_jobs(monitor, tmp_path / "kubeconfig")
    assert "\n" not in str(refused.value)
