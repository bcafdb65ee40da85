"""`render --split cpu-gpu`: the CPU stages and the model as three graph nodes, each in pods of its own.

One predictor, a Seldon graph run by Seldon's executor over V2 REST: OUTPUT_TRANSFORMER (top-k) -> TRANSFORMER
(decode, resize, normalise) -> MODEL, or the graphs `export convert --split` cut from the model's own layers.
Seldon Core 1.17.1's executor chains V2 nodes over REST only (its V2 gRPC client implements no transform calls),
renaming each answer's `outputs` to the next request's `inputs`, and calls every node by the model name in the
client's path (`/v2/models/<model>/infer`): so each pod serves the artifact under the model's own name, in its
role, while the graph nodes (and containers) are named apart. Each node is a componentSpec, so a Deployment and an
autoscaler of its own: the model's keeps the overlay's resources, placement and autoscaler (GPUs on the GPU
overlay); the two CPU ones get CPU requests and a CPU-utilization HPA (`wrappers.roles.serve` runs each
role). Applied to a pinned predictor, after GPU placement.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from slipway.artifact import SETTINGS_FILE

SPLITS = ("cpu-gpu",)
NO_ENGINE = "seldon.io/no-engine"
ROLE_COMMAND = ["python", "-m", "wrappers.roles.serve"]
ARTIFACT_DIR = "/mnt/models"  # where Seldon's storage initializer puts each node's modelUri
# (graph type, role, node name suffix) for the two CPU nodes, in graph order from the root
CPU_NODES = (("OUTPUT_TRANSFORMER", "output-transformer", "-post"), ("TRANSFORMER", "transformer", "-pre"))
CPU_RESOURCES = {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
CPU_REPLICAS = {"minReplicas": 1, "maxReplicas": 8}
CPU_TARGET = 70  # % of the CPU request; the stages are CPU-bound, so CPU tracks their load
# Only the scratch volume: GPU-only state (TensorRT's cache, a PVC) stays on the model's pods.
CPU_VOLUMES = ("tmp", "dshm")
GPU_ONLY_ENV = ("SLIPWAY_TENSORRT_CACHE_DIR",)
GRAPH_NODE_KEYS = ("modelUri", "envSecretRefName", "storageInitializerImage")
# Where the gateway reaches the executor: Seldon 1.17.1's operator defaults (ENGINE_SERVER_PORT, ..._GRPC_PORT).
EXECUTOR_PORTS = (8000, 5001)


class SplitError(ValueError):
    """The split cannot be rendered from this overlay; the message says what to pass instead."""


def split_predictor(predictor: dict[str, Any]) -> None:
    """Turn a pinned one-node predictor into the three-node graph, in place (see the module's doc)."""
    graph = predictor["graph"]
    if graph.get("children") or len(predictor.get("componentSpecs", [])) != 1:
        raise SplitError(
            f"predictor {predictor['name']} is not one model in one component: --split cpu-gpu splits "
            "the shipped one-node overlays (cpu, gpu)"
        )
    model = graph["name"]
    model_component = predictor["componentSpecs"][0]
    container = _container(model_component, model)
    container["args"] = role_args("model", model)
    components, node = [model_component], graph
    for node_type, role, suffix in reversed(CPU_NODES):  # built inside out: the transformer wraps the model
        name = f"{model}{suffix}"
        components.append(cpu_component(model_component, model, name, role))
        node = {
            "name": name,
            "type": node_type,
            **{key: graph[key] for key in GRAPH_NODE_KEYS if key in graph},
            "children": [node],
        }
    predictor["graph"] = node
    predictor["componentSpecs"] = components
    annotations = predictor.get("annotations", {})
    annotations.pop(NO_ENGINE, None)  # the executor runs the graph


def open_executor_ports(policy: dict) -> None:
    """Let the callers of the inference ports (the gateway, the model's namespace) reach the executor, in place."""
    for rule in policy["spec"].get("ingress", []):
        ports = rule.get("ports", [])
        if any(port.get("port") == 9000 for port in ports):
            known = {port.get("port") for port in ports}
            rule["ports"] = [*ports, *({"protocol": "TCP", "port": port} for port in EXECUTOR_PORTS if port not in known)]


def check_artifact(folder: Path) -> None:
    """Refuse, before anything is written, an artifact whose settings lack a stage a CPU node would run."""
    try:
        extra = (json.loads((folder / SETTINGS_FILE).read_text()).get("parameters") or {}).get("extra") or {}
    except (OSError, ValueError) as err:
        raise SplitError(f"cannot read {folder / SETTINGS_FILE} ({err})") from None
    missing = [stage for stage in ("preprocess", "postprocess") if extra.get(stage) is None]
    if missing:
        raise SplitError(
            f"{folder}/{SETTINGS_FILE} sets no parameters.extra.{' or '.join(missing)}: --split cpu-gpu "
            "serves the pre/post stages in pods of their own; set both (`python -m export convert --split` cuts "
            "them from the model's own preprocessing layers and softmax), or render without it"
        )


def role_args(role: str, name: str) -> list[str]:
    return [*ROLE_COMMAND, role, ARTIFACT_DIR, "--name", name]


def cpu_component(model_component: dict, model: str, name: str, role: str) -> dict:
    """A copy of the model's component for one CPU node: its container renamed and in its role, CPU resources,
    no GPU placement or GPU-only volumes, and a CPU-utilization HPA on its own container."""
    component = copy.deepcopy(model_component)
    spec = component["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "runtimeClassName"):
        spec.pop(key, None)
    spec["volumes"] = [volume for volume in spec.get("volumes", []) if volume["name"] in CPU_VOLUMES]
    container = _container(component, model)
    container.update(name=name, args=role_args(role, model), resources=copy.deepcopy(CPU_RESOURCES))
    container["volumeMounts"] = [mount for mount in container.get("volumeMounts", []) if mount["name"] in CPU_VOLUMES]
    container["env"] = [item for item in container.get("env", []) if item["name"] not in GPU_ONLY_ENV]
    component.pop("kedaSpec", None)
    component["hpaSpec"] = {
        **CPU_REPLICAS,
        "metricsv2": [
            {
                "type": "ContainerResource",
                "containerResource": {
                    "name": "cpu",
                    "container": name,
                    "target": {"type": "Utilization", "averageUtilization": CPU_TARGET},
                },
            }
        ],
    }
    component.pop("pdbSpec", None)  # Seldon's budget selects every pod of the SeldonDeployment: the model's one covers all
    return component


def _container(component: dict, name: str) -> dict:
    for container in component.get("spec", {}).get("containers", []):
        if container["name"] == name:
            return container
    raise SplitError(f"no container named {name!r} (the graph's model) in the predictor's component")
