"""Kustomize JSON 6902 patches for the model container and autoscaler of Slipway's SeldonDeployment.

A strategic-merge patch cannot touch a SeldonDeployment's `componentSpecs` without replacing
the whole list (custom resources carry no merge keys), so `make tune` and `make recommend`
write JSON 6902 operations on the first component and its first container (the model
container of `deployments/base`, as the shipped overlays' sizing patches do), plus an
overlay kustomization on top of a shipped overlay that applies them.
PyYAML is imported where it is used: the serving image carries `slipway` without it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from slipway import atomic

COMPONENT = "/spec/predictors/0/componentSpecs/0"
CONTAINER = f"{COMPONENT}/spec/containers/0"
KIND = "SeldonDeployment"
# The model container's name in an HPA metric, before rendering: `python -m deployments render` replaces it with
# each predictor's model container (the model's name), which the manifests only know once a version is chosen.
MODEL_CONTAINER = "$(MODEL_CONTAINER)"
GPU_RESOURCE = "nvidia.com/gpu"  # whole units: Kubernetes extended resources take no fractions


def cpu_quantity(cores: float) -> str:
    """Cores as a Kubernetes quantity, rounded up to 10 millicores."""
    return f"{max(10, math.ceil(cores * 100) * 10)}m"


def memory_quantity(size: float) -> str:
    """Bytes as a Kubernetes quantity, rounded up to a mebibyte."""
    return f"{max(1, math.ceil(size / 2**20))}Mi"


def resources_op(
    *, cpu_request: float, cpu_limit: float, memory_request: float, memory_limit: float, gpus: int | None = None
) -> dict[str, Any]:
    """Replace the model container's resources; `gpus` whole GPUs go into both requests and limits, since the op
    replaces the whole block and a GPU overlay's pod without them would land on no GPU."""
    requests: dict[str, str | int] = {"cpu": cpu_quantity(cpu_request), "memory": memory_quantity(memory_request)}
    limits: dict[str, str | int] = {"cpu": cpu_quantity(cpu_limit), "memory": memory_quantity(memory_limit)}
    if gpus is not None:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = int(gpus)
    return {"op": "replace", "path": f"{CONTAINER}/resources", "value": {"requests": requests, "limits": limits}}


def hpa_ops(
    *, metrics: list[dict[str, Any]] | None = None, min_replicas: int | None = None, max_replicas: int | None = None
) -> list[dict[str, Any]]:
    ops = []
    if min_replicas is not None:
        ops.append({"op": "replace", "path": f"{COMPONENT}/hpaSpec/minReplicas", "value": int(min_replicas)})
    if max_replicas is not None:
        ops.append({"op": "replace", "path": f"{COMPONENT}/hpaSpec/maxReplicas", "value": int(max_replicas)})
    if metrics is not None:
        ops.append({"op": "replace", "path": f"{COMPONENT}/hpaSpec/metricsv2", "value": metrics})
    return ops


def container_utilization_metric(resource: str, percent: int, container: str = MODEL_CONTAINER) -> dict[str, Any]:
    """An HPA target on one container's usage over its own request (`ContainerResource`): the model container's,
    which `python -m deployments render` pins per predictor; `--hpa-metric-source pod` turns it into `Resource`."""
    return {
        "type": "ContainerResource",
        "containerResource": {
            "name": resource,
            "container": container,
            "target": {"type": "Utilization", "averageUtilization": int(percent)},
        },
    }


def cpu_utilization_metric(percent: int, container: str = MODEL_CONTAINER) -> dict[str, Any]:
    return container_utilization_metric("cpu", percent, container)


def pods_metric(name: str, average_value: float) -> dict[str, Any]:
    """A per-pod custom metric (served by prometheus-adapter), e.g. requests per second."""
    return {
        "type": "Pods",
        "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": f"{average_value:g}"}},
    }


def env_op(env: list[dict[str, Any]] | None, name: str, value: str) -> list[dict[str, Any]]:
    """Set one container env var: test-and-replace where the base defines it (a changed base then fails
    loudly in kustomize instead of patching the wrong entry), append otherwise."""
    for index, item in enumerate(env or []):
        if item.get("name") == name:
            path = f"{CONTAINER}/env/{index}"
            return [
                {"op": "test", "path": f"{path}/name", "value": name},
                {"op": "replace", "path": f"{path}/value", "value": value},
            ]
    return [{"op": "add", "path": f"{CONTAINER}/env/-", "value": {"name": name, "value": value}}]


def write_overlay(out_dir: Path, ops: list[dict[str, Any]], *, base: Path, comment: str) -> tuple[Path, Path]:
    """Write `patch.yaml` (the operations, with `comment` on top) and a `kustomization.yaml` that
    applies them to the SeldonDeployment of `base` (an overlay folder); returns both paths."""
    import yaml

    out_dir = Path(out_dir)
    header = "".join(f"# {line}\n" if line else "#\n" for line in comment.strip().splitlines())
    patch = out_dir / "patch.yaml"
    atomic.write_text(patch, header + yaml.safe_dump(ops, sort_keys=False))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [_relative(base, out_dir)],
        "patches": [{"path": patch.name, "target": {"kind": KIND}}],
    }
    path = out_dir / "kustomization.yaml"
    usage = f"# Render it for a model version: make manifests OVERLAY={out_dir} (or kubectl kustomize {out_dir})\n"
    atomic.write_text(path, usage + yaml.safe_dump(kustomization, sort_keys=False))
    return patch, path


def _relative(target: Path, start: Path) -> str:
    import os

    return os.path.relpath(Path(target).resolve(), Path(start).resolve())


def base_container_env(base: Path) -> list[dict[str, Any]]:
    """The model container's env in a base SeldonDeployment YAML (empty if it cannot be read)."""
    import yaml

    for path in sorted(Path(base).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == KIND:
                try:
                    env: list[dict[str, Any]] = doc["spec"]["predictors"][0]["componentSpecs"][0]["spec"]["containers"][0].get(
                        "env", []
                    )
                    return env
                except (KeyError, IndexError, TypeError):
                    return []
    return []
