"""The HPA really scales on the local cluster: kwok's simulated CPU usage, a real metrics-server, the real HPA controller."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localcluster.control_plane import HPA_SYNC_S
from slipway.paths import PROJECT_ROOT
from tests.conftest import run_module
from tests.localcluster.conftest import make_namespace

pytestmark = pytest.mark.slow

WINDOW_DOWN_S = 45
# The behavior component's HPA, sized for a test: 2 to 4 replicas, up by 2 pods per 15 s at once,
# down after a 45 s window at most 100% per 15 s.
BEHAVIOR = f"""
- op: replace
  path: /spec/minReplicas
  value: 2
- op: replace
  path: /spec/maxReplicas
  value: 4
- op: replace
  path: /spec/behavior
  value:
    scaleUp:
      stabilizationWindowSeconds: 0
      policies: [{{type: Pods, value: 2, periodSeconds: 15}}]
    scaleDown:
      stabilizationWindowSeconds: {WINDOW_DOWN_S}
      policies: [{{type: Percent, value: 100, periodSeconds: 15}}]
"""


def _overlay(folder: Path) -> Path:
    """An SRE's overlay: the CPU overlay with the standalone-HPA component and its own scaling behaviour."""
    folder.mkdir(parents=True)
    deployments = PROJECT_ROOT / "deployments"
    (folder / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(deployments / 'overlays' / 'cpu', folder)}]\n"
        f"components: [{os.path.relpath(deployments / 'components' / 'autoscaling-behavior', folder)}]\n"
        "patches:\n  - path: behavior.yaml\n    target: {kind: HorizontalPodAutoscaler}\n"
    )
    (folder / "behavior.yaml").write_text(BEHAVIOR)
    return folder


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
        str(_overlay(tmp_path / "sre" / "overlay")),
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
    samples = report["samples"]
    high = [s for s in samples if s["phase"] == "high"]
    low = [s for s in samples if s["phase"] == "low"]
    assert high[0]["replicas"] == 2 and high[-1]["replicas"] == 4 and low[-1]["replicas"] == 2
    assert max(s["utilization"] or 0 for s in high) > 70  # above the HPA's target: why it scaled
    # scaled up in steps no larger than the policy allows, never past the maximum
    steps = [b["replicas"] - a["replicas"] for a, b in zip(samples, samples[1:])]
    assert max(steps) <= 2 and max(s["replicas"] for s in samples) == 4
    # Held the replicas through the scale-down window: the first sync that saw low usage came at most one sync
    # period after the last high recommendation, and without a window it would have scaled down right there.
    seen_low = next(s["seconds"] for s in low if s["utilization"] is not None and s["utilization"] < 70)
    first_down = next(s["seconds"] for s in low if s["replicas"] < 4)
    assert first_down - seen_low >= WINDOW_DOWN_S - HPA_SYNC_S - 2 * 2  # 2 s sampling, both ends
    assert report["behavior"]["scale_down"]["stabilization_window_seconds"] == WINDOW_DOWN_S
