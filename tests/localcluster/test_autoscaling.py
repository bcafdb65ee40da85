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

    report = json.loads((Path(cluster_env["SLIPWAY_REPORTS_DIR"]) / "cluster-hpa.json").read_text())
    assert (Path(cluster_env["SLIPWAY_REPORTS_DIR"]) / "cluster-hpa.png").stat().st_size > 10_000
    # the HPA read the model container alone (ContainerResource): metrics-server's per-container usage from kwok
    assert report["container"] == "digits"
    assert [(m["type"], m["container_resource"]["name"], m["container_resource"]["container"]) for m in report["metrics"]] == [
        ("ContainerResource", "cpu", "digits"),
        ("ContainerResource", "memory", "digits"),
    ]
    check_scaled_within_behavior(report)
