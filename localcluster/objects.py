"""What the local control plane holds before any model is deployed.

The CRDs (Seldon's from its vendored module, PodMonitor's, PrometheusRule's and ScaledObject's from
theirs, KServe's ServingRuntime and InferenceService from its module, kwok's usage and metrics kinds),
the fake nodes kwok keeps Ready (CPU nodes and one tainted GPU node), the aggregated metrics API served
by metrics-server, and the Seldon operator's ConfigMap and admission webhooks, the webhooks called at a
loopback URL since the operator runs as a process.
"""

from __future__ import annotations

import base64
import socket
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from localcluster.components import SELDON_FILES, SELDON_OPERATOR_VERSION
from localcluster.pki import ClusterPKI
from slipway import atomic

FIELD_MANAGER = "slipway-cluster"
SELDON_NAMESPACE = "seldon-system"
SELDON_CONFIGMAP = "seldon-config"
OPERATOR_DEPLOYMENT = "seldon-controller-manager"  # as Seldon's Helm chart names it
SELDON_WEBHOOKS = "seldon-validating-webhook-configuration"
METRICS_API_SERVICE = "v1beta1.metrics.k8s.io"
KWOK_CRDS = ("Metric", "ClusterResourceUsage", "ResourceUsage")
# (component, file in its cache folder's share/)
CRD_FILES = (
    ("crds", "crd-podmonitors.yaml"),
    ("crds", "crd-prometheusrules.yaml"),
    ("crds", "crd-scaledobjects.yaml"),
    ("kwok", "crd-kwok-clusterresourceusages.yaml"),
    ("kwok", "crd-kwok-resourceusages.yaml"),
    ("kwok", "crd-kwok-metrics.yaml"),
    # KServe's kinds, so that `render --engine kserve`'s objects go through the API server's own checks
    # (server-side dry run); its controller and webhooks run with `up --kserve` (kserve.py)
    ("kserve-crds", "crd-servingruntimes.yaml"),
    ("kserve-crds", "crd-inferenceservices.yaml"),
)
KWOK_STAGES = (
    "kwok-node-initialize.yaml",
    "kwok-node-heartbeat.yaml",
    "kwok-pod-ready.yaml",
    "kwok-pod-complete.yaml",
    "kwok-pod-delete.yaml",
)
GPU_RESOURCE = "nvidia.com/gpu"
# name, CPU cores, memory, GPUs: three CPU nodes (replicas spread across them) and one GPU node
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node=fake"  # the nodes kwok manages (not a real node's)
NODES = (
    ("slipway-cpu-1", "8", "32Gi", 0),
    ("slipway-cpu-2", "8", "32Gi", 0),
    ("slipway-cpu-3", "8", "32Gi", 0),
    ("slipway-gpu-1", "16", "64Gi", 2),
)
# The operator's own settings that the local cluster changes from its kustomize defaults
# (config/manager/manager.yaml): no ingress runs, so the traffic split shows in Ambassador v1's
# Service annotations (no CRDs needed); KEDA's ScaledObject CRD is installed, so kedaSpec works.
OPERATOR_ENV = {
    "AMBASSADOR_ENABLED": "true",
    "AMBASSADOR_VERSION": "v1",
    "ISTIO_ENABLED": "false",
    "KEDA_ENABLED": "true",
    "POD_NAMESPACE": SELDON_NAMESPACE,
}


def client(kubeconfig: Path):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def apply(api, doc: dict[str, Any]) -> None:
    """Server-side apply one object."""
    from deployments.rollout.kube_api import dynamic_client

    resource = dynamic_client(api).resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    kwargs = {"namespace": doc["metadata"].get("namespace")} if resource.namespaced else {}
    resource.server_side_apply(
        body=doc, name=doc["metadata"]["name"], field_manager=FIELD_MANAGER, force_conflicts=True, **kwargs
    )


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def install_crds(api, bins: dict[str, Path]) -> None:
    """Every CRD the overlays and kwok need, then wait until the API server serves each."""
    from deployments.render.kustomize import build_with_kubectl

    docs = [
        *build_with_kubectl(SELDON_FILES["crd"]),
        *(doc for component, name in CRD_FILES for doc in documents(bins[component] / "share" / name)),
    ]
    for doc in docs:
        apply(api, doc)
    wait_established(api, [doc["metadata"]["name"] for doc in docs])


class _Status(Protocol):
    @property
    def conditions(self) -> Sequence[Any] | None: ...


def _conditions(status: _Status | None) -> Sequence[Any]:
    """The conditions of a Kubernetes object's status: none before the object has a status, or the status any."""
    return (status.conditions if status is not None else None) or []


def wait_established(api, names: list[str]) -> None:
    """Wait until the API server serves each of the CRDs `names` (60 s at most in all)."""
    from kubernetes import client as k8s

    extensions = k8s.ApiextensionsV1Api(api)
    deadline = time.monotonic() + 60
    for name in names:
        while not any(
            condition.type == "Established" and condition.status == "True"
            for condition in _conditions(extensions.read_custom_resource_definition(name).status)
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} is not Established after 60s")
            time.sleep(0.2)


def write_kwok_config(path: Path, bins: dict[str, Path]) -> Path:
    """kwok's stages (nodes Ready with a lease heartbeat; pods Ready, completed, deleted) from its module."""
    docs = [doc for name in KWOK_STAGES for doc in documents(bins["kwok"] / "share" / name)]
    atomic.write_text(path, yaml.safe_dump_all(docs, sort_keys=False))
    return path


def create_nodes(api, bins: dict[str, Path]) -> None:
    """The fake nodes; kwok's Metric that serves their resource metrics to metrics-server, and its baseline usage
    for every pod (1m CPU, 1Mi, or what the pod's `kwok.x-k8s.io/usage-*` annotations say), so each pod has metrics."""
    for name in ("kwok-metrics-resource.yaml", "kwok-usage-from-annotation.yaml"):
        for doc in documents(bins["kwok"] / "share" / name):
            apply(api, doc)
    for name, cpu, memory, gpus in NODES:
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", **({GPU_RESOURCE: str(gpus)} if gpus else {})}
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            "topology.kubernetes.io/zone": "local",
        }
        if gpus:
            labels["nvidia.com/gpu.present"] = "true"  # GPU feature discovery's label
            labels["cloud.google.com/gke-accelerator"] = "nvidia-l4"  # GKE's: what --gpu-node-selector is tested on
        apply(
            api,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {
                        "kwok.x-k8s.io/node": "fake",
                        "node.alpha.kubernetes.io/ttl": "0",
                        "metrics.k8s.io/resource-metrics-path": f"/metrics/nodes/{name}/metrics/resource",
                    },
                },
                "spec": {"taints": [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}] if gpus else []},
                "status": {"capacity": capacity, "allocatable": capacity},
            },
        )


def nodes_ready(api) -> bool:
    from kubernetes import client as k8s

    key, value = KWOK_NODE_ANNOTATION.split("=")
    nodes = [
        node
        for node in k8s.CoreV1Api(api).list_node().items
        if node.metadata and (node.metadata.annotations or {}).get(key) == value
    ]
    return len(nodes) == len(NODES) and all(
        any(c.type == "Ready" and c.status == "True" for c in _conditions(node.status)) for node in nodes
    )


def register_metrics_api(api, port: int, ca: Path) -> None:
    """metrics.k8s.io served by the metrics-server process: an APIService behind an ExternalName Service."""
    apply(
        api,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "metrics-server", "namespace": "kube-system"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
        },
    )
    apply(
        api,
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": METRICS_API_SERVICE},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": base64.b64encode(ca.read_bytes()).decode(),
                "service": {"name": "metrics-server", "namespace": "kube-system", "port": port},
            },
        },
    )


def api_service_available(api, name: str) -> bool:
    from kubernetes import client as k8s

    status = k8s.ApiregistrationV1Api(api).read_api_service(name).status
    return any(c.type == "Available" and c.status == "True" for c in _conditions(status))


def write_webhook_certs(folder: Path, pki: ClusterPKI) -> Path:
    """The operator's TMPDIR, holding its webhook certificate where controller-runtime looks for it."""
    serving = pki.pair("seldon-webhook")
    certs = folder / "k8s-webhook-server" / "serving-certs"
    certs.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(certs / "tls.crt", serving.cert.read_bytes())
    atomic.write_bytes(certs / "tls.key", serving.key.read_bytes())
    return folder


def install_seldon_config(api, webhook_port: int, ca: Path) -> None:
    """The operator's namespace, its `seldon-config` ConfigMap and its validating webhooks, from its module."""
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SELDON_NAMESPACE}})
    configmap = documents(SELDON_FILES["configmap"])[0]
    # labelled as Seldon's Helm chart labels it: `deploy`'s preflight reads the operator's version there
    labels = {**configmap["metadata"].get("labels", {}), "app.kubernetes.io/version": SELDON_OPERATOR_VERSION}
    configmap["metadata"] = {"name": SELDON_CONFIGMAP, "namespace": SELDON_NAMESPACE, "labels": labels}
    apply(api, configmap)
    ca_bundle = base64.b64encode(ca.read_bytes()).decode()
    for doc in documents(SELDON_FILES["webhooks"]):
        doc["metadata"] = {"name": SELDON_WEBHOOKS}
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}", "caBundle": ca_bundle}
        apply(api, doc)


def seldon_operator_env() -> dict[str, str]:
    """The operator's environment as its module's manager Deployment sets it, with OPERATOR_ENV's changes."""
    manager = documents(SELDON_FILES["manager"])
    deployment = next(doc for doc in manager if doc.get("kind") == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    env = {item["name"]: str(item.get("value", "")) for item in container.get("env", []) if "valueFrom" not in item}
    return {**env, **OPERATOR_ENV}


def register_operator(api) -> None:
    """The operator's Deployment as its kustomize install makes it, with the image and environment of the process
    that runs on this machine, at 0 replicas: tools that inspect a cluster (deploy's preflight reads the image's
    version and the ingress settings) see what they would see on a real one."""
    manager = documents(SELDON_FILES["manager"])
    deployment = next(doc for doc in manager if doc.get("kind") == "Deployment")
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager")
    container["image"] = f"seldonio/seldon-core-operator:{SELDON_OPERATOR_VERSION}"
    container["env"] = [{"name": name, "value": value} for name, value in seldon_operator_env().items()]
    deployment["metadata"].update(
        name=OPERATOR_DEPLOYMENT,
        namespace=SELDON_NAMESPACE,
        annotations={"slipway.io/local-cluster": "the operator runs as a process on this machine (build/cluster/logs)"},
    )
    deployment["spec"]["replicas"] = 0
    apply(api, deployment)


def create_bucket(storage_env: dict[str, str], bucket: str) -> None:
    """The bucket, made through the store's S3 API with the keys `deploy` will use."""
    from fsspec.core import url_to_fs

    from deployments.rollout.storage_secret import fsspec_options, settings_from_environment

    settings, _ = settings_from_environment("s3", storage_env)
    fs, _ = url_to_fs(f"s3://{bucket}", **fsspec_options("s3", settings))
    fs.mkdir(bucket)


def create_namespace(api, name: str, storage_env: dict[str, str]) -> None:
    """A namespace for models, with the storage Secrets as `make secret` writes them: Seldon's, which the base's
    envSecretRefName names, and KServe's, which `render --engine kserve`'s ServiceAccount lists."""
    from deployments.kserve.render import STORAGE_SECRET
    from deployments.kserve.storage import s3_secret
    from deployments.rollout.storage_secret import DEFAULT_SECRET, secret_manifest, settings_from_environment

    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    apply(api, secret_manifest(DEFAULT_SECRET, name, settings_from_environment("s3", storage_env)[0]))
    apply(api, s3_secret(STORAGE_SECRET, name, storage_env)[0])


def webhook_answers(port: int, ca: Path) -> bool:
    """Whether the operator's webhook server completes a TLS handshake with the certificate we gave it."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=1) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1"):
        return True
