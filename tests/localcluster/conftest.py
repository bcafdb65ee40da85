"""The local control plane the cluster tests share: started once for this folder's tests, stopped by PID after them
(package scope, so that it does not idle beside the rest of the suite). Under pytest-xdist these tests go to one
worker together (tests/conftest.py), so that one control plane serves them all."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.deployments.conftest import record_files  # noqa: F401 (a fixture: the version records deploy reads)

MODEL = "digits"
SECRET = "slipway-model-storage"
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
STORAGE_ENV: dict[str, str] = {}  # the running test cluster's object store, as AWS_* variables (set by `cluster`)
T = TypeVar("T")


def until(condition: Callable[[], T], timeout_s: float = 90, what: str = "condition") -> T:
    """Ask `condition()` every half second until it answers something true, and return that; fail when `timeout_s`
    passes first. The cluster tests' one wait for what a controller does in its own time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached within {timeout_s}s")


@contextmanager
def control_plane(tmp_path_factory, name: str, **components: bool) -> Iterator[Any]:
    """A local control plane of its own on a free port (with `components`: `with_keda`, `with_kserve`), stopped by
    PID afterwards, every process of it gone and its folder removed."""
    from localcluster.control_plane import down, up
    from localcluster.processes import running
    from slipway.ports import free_port

    folder = tmp_path_factory.mktemp(name) / "state"
    state = up(folder, api_port=free_port(), tied=True, **components)
    processes = list(state.processes)
    try:
        yield state
    finally:
        down(folder)
        assert not any(running(process) for process in processes) and not folder.exists()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory):
    """The package's control plane, without the opt-in components."""
    with control_plane(tmp_path_factory, "cluster") as state:
        STORAGE_ENV.update(state.storage_environment())
        try:
            yield state
        finally:
            STORAGE_ENV.clear()


@pytest.fixture(scope="package")
def api(cluster):
    from localcluster.objects import client

    return client(cluster.kubeconfig)


@pytest.fixture(scope="package")
def cluster_env(cluster, reports_env) -> dict[str, str]:
    return {**reports_env, "KUBECONFIG": str(cluster.kubeconfig), "COLUMNS": "400"}


def make_namespace(api, name: str, *, secret: bool = True) -> str:
    """Create namespace `name`, with the storage Secret for the cluster's object store (as `make secret` writes it
    from the store's keys) unless `secret` is false."""
    from kubernetes import client

    from localcluster.objects import create_namespace

    if secret:
        create_namespace(api, name, STORAGE_ENV)
    else:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def records(tmp_path: Path, artifact: Path, *versions: str) -> list[Path]:
    """Store records of `versions` of the digits artifact, as `export versions show` writes them for a store on this
    machine: each a folder of its own whose settings name the version, so each has its own digest."""
    import shutil

    from slipway.artifact import SETTINGS_FILE, write_manifest

    paths = []
    for version in versions:
        folder = tmp_path / f"digits-{version}"
        shutil.copytree(artifact, folder)
        settings = json.loads((folder / SETTINGS_FILE).read_text())
        settings["parameters"]["version"] = version
        (folder / SETTINGS_FILE).write_text(json.dumps(settings))
        path = tmp_path / f"record-{version}.json"
        path.write_text(
            json.dumps({"name": MODEL, "version": version, "uri": f"file://{folder}", "digest": write_manifest(folder).digest})
        )
        paths.append(path)
    return paths


def digest_of(record: Path) -> str:
    return f"sha256:{json.loads(record.read_text())['digest']}"


def behavior_overlay(folder: Path) -> Path:
    """An SRE's overlay: the CPU overlay with the standalone-HPA component and its own scaling behaviour (BEHAVIOR)."""
    from slipway.paths import PROJECT_ROOT

    folder.mkdir(parents=True)
    deployments = PROJECT_ROOT / "deployments"
    (folder / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(deployments / 'overlays' / 'cpu', folder)}]\n"
        f"components: [{os.path.relpath(deployments / 'components' / 'autoscaling-behavior', folder)}]\n"
        "patches:\n  - path: behavior.yaml\n    target: {kind: HorizontalPodAutoscaler}\n"
    )
    (folder / "behavior.yaml").write_text(BEHAVIOR)
    return folder


def check_scaled_within_behavior(report: dict) -> None:
    """What `prove-hpa` recorded for an HPA of BEHAVIOR: up from 2 to 4 in steps the policy allows while the utilization
    was over the target, the 4 held through the scale-down window once usage fell, then back to 2."""
    from localcluster.control_plane import HPA_SYNC_S

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
