"""What must already be on the cluster before `deploy` sends anything, each missing piece one line.

The namespace; every kind the manifests use (Seldon's, the Prometheus operator's, KEDA's); a
Seldon Core operator of 1.17.1 or later (the first that adds the model-download init container
to custom images, which Slipway's image relies on); and the storage Secret each model's
`envSecretRefName` names, with the rclone settings its `modelUri` needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from deployments.apply import DeployError, dynamic_client

MINIMUM_OPERATOR = (1, 17, 1)
OPERATOR_LABEL = "control-plane=seldon-controller-manager"  # on the operator's Deployment and seldon-config (Helm, kustomize)
VERSION_LABEL = "app.kubernetes.io/version"
RCLONE_TYPES = {"s3": "s3", "gs": "google cloud storage"}  # a URI scheme's rclone backend, where the names differ
# What to install when the cluster does not serve a kind we render.
PROVIDERS = {
    "SeldonDeployment": "the Seldon Core operator, 1.17.1 or later",
    "PodMonitor": "the Prometheus operator (or drop podmonitor.yaml in your overlay)",
    "ScaledObject": "KEDA",
}


def _required_kinds(docs: list[dict]) -> set[tuple[str, str]]:
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in docs}
    if any(component.get("kedaSpec") for doc in docs if doc["kind"] == "SeldonDeployment"
           for predictor in doc["spec"]["predictors"] for component in predictor.get("componentSpecs", [])):
        kinds.add(("keda.sh/v1alpha1", "ScaledObject"))
    return kinds


def _graph_nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("children") or []:
        yield from _graph_nodes(child)


def storage_secrets(docs: list[dict]) -> dict[str, set[str]]:
    """Each Secret the SeldonDeployments' models name, with the URI schemes it must hold rclone settings for."""
    needed: dict[str, set[str]] = {}
    for doc in docs:
        if doc["kind"] != "SeldonDeployment":
            continue
        for predictor in doc["spec"]["predictors"]:
            for node in _graph_nodes(predictor["graph"]):
                scheme = (node.get("modelUri") or "").partition("://")[0]
                if node.get("envSecretRefName") and scheme and scheme not in ("pvc", "file"):
                    needed.setdefault(node["envSecretRefName"], set()).add(scheme)
    return needed


def parse_version(text: str) -> tuple[int, ...] | None:
    """`1.17.1`, `v1.16.0` or an image reference's tag -> (1, 17, 1); None when it is no version."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?", text.strip())
    return tuple(int(part or 0) for part in match.groups()) if match else None


def operator_versions(api) -> dict[str, str]:
    """Where the Seldon operator is installed -> the version it says it is (image tag, or Helm's version label)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    found: dict[str, str] = {}
    try:
        for deployment in client.AppsV1Api(api).list_deployment_for_all_namespaces(label_selector=OPERATOR_LABEL).items:
            for container in deployment.spec.template.spec.containers:
                tag = container.image.rpartition(":")[2] if "@" not in container.image else ""
                if "seldon-core-operator" in container.image and parse_version(tag):
                    found[f"Deployment {deployment.metadata.namespace}/{deployment.metadata.name}"] = tag
        if not found:
            for configmap in client.CoreV1Api(api).list_config_map_for_all_namespaces(label_selector=OPERATOR_LABEL).items:
                version = (configmap.metadata.labels or {}).get(VERSION_LABEL, "")
                if parse_version(version):
                    found[f"ConfigMap {configmap.metadata.namespace}/{configmap.metadata.name}"] = version
    except ApiException as err:
        if err.status != 403:
            raise
    return found


def check_operator(api) -> str | None:
    """Refuse an operator older than 1.17.1; the warning to print when its version cannot be read."""
    versions = operator_versions(api)
    minimum = ".".join(map(str, MINIMUM_OPERATOR))
    if not versions:
        return (f"cannot tell the Seldon Core operator's version (no Deployment or ConfigMap labelled {OPERATOR_LABEL} "
                f"is visible): Slipway needs {minimum} or later")
    old = {where: version for where, version in versions.items() if parse_version(version) < MINIMUM_OPERATOR}
    if old:
        where, version = next(iter(old.items()))
        raise DeployError(f"the Seldon Core operator ({where}) is {version}; Slipway needs {minimum} or later, the first "
                          f"that adds the model-download init container to custom images: upgrade it "
                          f"(helm upgrade seldon-core seldon-core-operator --version {minimum})")
    return None


def check_secrets(api, docs: list[dict], namespace: str) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    for name, schemes in sorted(storage_secrets(docs).items()):
        try:
            secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
        except ApiException as err:
            if err.status == 404:
                scheme = sorted(schemes)[0]
                raise DeployError(f"Secret {name!r} (the models' envSecretRefName) does not exist in namespace "
                                  f"{namespace!r}: create it with the storage credentials as rclone settings, e.g. "
                                  f"kubectl -n {namespace} create secret generic {name} "
                                  f"--from-literal=RCLONE_CONFIG_{scheme.upper()}_TYPE='{RCLONE_TYPES.get(scheme, scheme)}' "
                                  f"--from-literal=RCLONE_CONFIG_{scheme.upper()}_ENV_AUTH=true") from err
            if err.status == 403:
                continue  # may not read Secrets: the pods will say it
            raise
        keys = set((secret.data or {}) | (secret.string_data or {}))
        for scheme in sorted(schemes):
            wanted = f"RCLONE_CONFIG_{scheme.upper()}_TYPE"
            if wanted not in keys:
                raise DeployError(f"Secret {namespace}/{name} has no {wanted}: the storage initializer (rclone) reads "
                                  f"the {scheme}:// remote from RCLONE_CONFIG_{scheme.upper()}_* keys")


def preflight(api, docs: list[dict[str, Any]], namespace: str) -> list[str]:
    """Everything the apply needs must already be there; raise DeployError naming what is missing; return warnings."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        client.CoreV1Api(api).read_namespace(namespace)
    except ApiException as err:
        if err.status == 404:
            raise DeployError(f"namespace {namespace!r} does not exist: create it (kubectl create namespace {namespace}) "
                              "or pass NAMESPACE=") from err
        if err.status != 403:  # may not read namespaces: the dry run still finds a missing one
            raise DeployError(f"cannot read namespace {namespace!r}: {err.status} {err.reason}") from err
    dynamic = dynamic_client(api, fresh=True)
    missing = []
    for api_version, kind in sorted(_required_kinds(docs)):
        try:
            dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            missing.append(f"{api_version} {kind} (install {PROVIDERS.get(kind, 'its operator')})")
    if missing:
        raise DeployError(f"the cluster does not serve {'; '.join(missing)}")
    warnings = [warning] if (warning := check_operator(api)) else []
    check_secrets(api, docs, namespace)
    return warnings
