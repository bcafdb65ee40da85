"""The HPA really scales on the local cluster: kwok's simulated CPU usage, a real metrics-server, the real HPA controller."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_module
from tests.localcluster.conftest import behavior_overlay, check_scaled_within_behavior, make_namespace

pytestmark = pytest.mark.slow


def test_the_hpa_scales_up_on_usage_and_down_within_its_behavior(api, cluster, cluster_env, digits_artifact, tmp_path):
    ns = make_namespace(api, "hpa")
    run_module(
        "deployments",
        "deploy",
        "--namespace",
        ns,
        "--model-dir",
        str(digits_artifact),
        "--overlay",
        str(behavior_overlay(tmp_path / "sre" / "overlay")),
        "--wait",
        "120",
        env=cluster_env,
    )
    result = run_module(
        "localcluster",
        "prove-hpa",
        "--dir",
        str(cluster.folder),
        "--namespace",
        ns,
        "--timeout",
        "240",
        env=cluster_env,
    )
    assert "scaled 2 -> 4 -> 2" in result.stderr

    reports = Path(cluster_env["SLIPWAY_REPORTS_DIR"])
    report = json.loads((reports / "cluster-hpa.json").read_text())
    assert (reports / "cluster-hpa.png").stat().st_size > 10_000
    # Seldon's record keeps its name; KServe's has its own (test_kserve_controller.py), so neither overwrites the other
    assert report["engine"] == "seldon"
    # the HPA read the model container alone (ContainerResource): metrics-server's per-container usage from kwok
    assert report["container"] == "digits"
    assert [(m["type"], m["container_resource"]["name"], m["container_resource"]["container"]) for m in report["metrics"]] == [
        ("ContainerResource", "cpu", "digits"),
        ("ContainerResource", "memory", "digits"),
    ]
    check_scaled_within_behavior(report)


def test_prove_hpa_refuses_an_hpa_on_a_deployment_no_engine_made(api, cluster, cluster_env, tmp_path):
    """The record is named after the engine that made the HPA's target: a Deployment neither a SeldonDeployment nor an
    InferenceService owns is refused in one line before any usage is simulated, and nothing is recorded."""
    from kubernetes import client

    ns = make_namespace(api, "hpa-unowned", secret=False)
    labels = {"app": "plain"}
    client.AppsV1Api(api).create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "plain", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            },
        },
    )
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        ns,
        {
            "metadata": {"name": "plain"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "plain"},
                "minReplicas": 1,
                "maxReplicas": 2,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}}
                ],
            },
        },
    )
    env = {**cluster_env, "SLIPWAY_REPORTS_DIR": str(tmp_path / "reports")}
    result = run_module("localcluster", "prove-hpa", "--dir", str(cluster.folder), "--namespace", ns, env=env, check=False)
    assert result.returncode != 0
    assert "scales Deployment plain, which neither a SeldonDeployment nor an InferenceService owns" in result.stderr
    assert not (tmp_path / "reports").exists()
    usages = client.CustomObjectsApi(api).list_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", ns, "resourceusages")
    assert usages["items"] == []
