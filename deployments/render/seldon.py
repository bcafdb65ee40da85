"""What Seldon Core v1 (1.17) does with a SeldonDeployment, as far as Slipway's manifests depend on it.

Read from the operator's source, not guessed: the ports and environment it gives a model
container, the names of the Deployments it creates, the inference path of its gateway. Kept
in one place so validation, rendering and the checkov projection agree.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from typing import Any

API_VERSION = "machinelearning.seldon.io/v1"
KIND = "SeldonDeployment"

# Container ports: Seldon uses a container's ports named http/grpc (else assigns 9000/9500 to the
# first graph container) and adds a "metrics" port (6000) when there is none.
HTTP_PORT, GRPC_PORT, METRICS_PORT = 9000, 9500, 6000
PORT_NAMES = {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT}
# The operator points MLServer's metrics endpoint here (its EXECUTOR_PROMETHEUS_PATH default).
METRICS_PATH = "/prometheus"
MODEL_MOUNT = "/mnt/models"
NO_ENGINE_ANNOTATION = "seldon.io/no-engine"
DEPLOYMENT_ID_LABEL = "seldon-deployment-id"
# Slipway's own labels: the model a resource belongs to, and the predictor (a standalone HPA's too).
MODEL_LABEL = "slipway.io/model"
PREDICTOR_LABEL = "slipway.io/predictor"

# Environment the operator writes into every graph container. Setting one of them yourself is
# worse than redundant: 1.17's SetEnvVar returns an empty list when the variable already exists
# (without override), so the container loses every environment variable set before it.
OPERATOR_ENV = (
    "MLSERVER_HTTP_PORT",
    "MLSERVER_GRPC_PORT",
    "MLSERVER_METRICS_PORT",
    "MLSERVER_METRICS_ENDPOINT",
    "MLSERVER_MODEL_NAME",
    "MLSERVER_MODEL_URI",
    "PREDICTIVE_UNIT_HTTP_SERVICE_PORT",
    "PREDICTIVE_UNIT_GRPC_SERVICE_PORT",
    "PREDICTIVE_UNIT_SERVICE_PORT",
    "PREDICTIVE_UNIT_ID",
    "PREDICTOR_ID",
    "SELDON_DEPLOYMENT_ID",
)
_K8S_NAME_LIMIT = 63


def _hash(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def deployment_name(sdep_name: str, predictor: dict, component_index: int) -> str:
    """The name Seldon gives the Deployment of one componentSpec (its GetDeploymentName)."""
    component = predictor["componentSpecs"][component_index]
    suffix = component.get("metadata", {}).get("name") or "-".join(
        c["name"] for c in component.get("spec", {}).get("containers", [])
    )
    name = f"{sdep_name}-{predictor['name']}-{component_index}-{suffix}"
    return name if len(name) <= _K8S_NAME_LIMIT else f"seldon-{_hash(name)}"


def inference_path(namespace: str, name: str, model: str) -> str:
    """Where the Seldon gateway (Istio or Ambassador) serves V2 inference for `model`."""
    return f"/seldon/{namespace}/{name}/v2/models/{model}/infer"


def pod_specs(sdep: dict) -> Iterator[tuple[dict, int, dict]]:
    """(predictor, component index, componentSpec) for every pod template of a SeldonDeployment."""
    for predictor in sdep.get("spec", {}).get("predictors", []):
        for index, component in enumerate(predictor.get("componentSpecs", [])):
            yield predictor, index, component


def projected_deployments(sdep: dict) -> list[dict[str, Any]]:
    """The apps/v1 Deployments the operator would create, reduced to what we control.

    Static scanners (checkov) know Deployments, not SeldonDeployments: this lets them check our
    pod template. It leaves out what Seldon injects (the storage initializer), which we do not write.
    """
    name = sdep["metadata"]["name"]
    namespace = sdep["metadata"].get("namespace")
    projected = []
    for predictor, index, component in pod_specs(sdep):
        dep_name = deployment_name(name, predictor, index)
        labels = {
            DEPLOYMENT_ID_LABEL: name,
            "app": dep_name,
            **predictor.get("labels", {}),
            **component.get("metadata", {}).get("labels", {}),
        }
        annotations = {**predictor.get("annotations", {}), **component.get("metadata", {}).get("annotations", {})}
        pod_spec = copy.deepcopy(component["spec"])
        for container in pod_spec.get("containers", []):
            if container["name"] == predictor["graph"]["name"] and predictor["graph"].get("modelUri"):
                container.setdefault("volumeMounts", []).append(
                    {"name": f"{container['name']}-provision-location", "mountPath": MODEL_MOUNT, "readOnly": True}
                )
                pod_spec.setdefault("volumes", []).append({"name": f"{container['name']}-provision-location", "emptyDir": {}})
        metadata = {"name": dep_name, "labels": labels, "annotations": annotations}
        if namespace:
            metadata["namespace"] = namespace
        projected.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": metadata,
                "spec": {
                    "selector": {"matchLabels": {DEPLOYMENT_ID_LABEL: name, "app": dep_name}},
                    "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec},
                },
            }
        )
    return projected
