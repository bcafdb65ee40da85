"""What must already be on the cluster before `deploy` sends anything, each missing piece one line.

The namespace; every kind the manifests use (Seldon's, the Prometheus operator's, KEDA's); a
Seldon Core operator of 1.17.1 or later (the first that adds the model-download init container
to custom images, which Slipway's image relies on), running with Istio or Ambassador where a
canary splits traffic (without one Seldon ignores `traffic`); and the storage Secret each
model's `envSecretRefName` names, with the rclone settings its `modelUri` needs. With
`deploy --check-image`, every model container's image must resolve in its registry too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from deployments.rollout.apply import DeployError
from deployments.rollout.kube_api import dynamic_client, present
from deployments.rollout.storage_secret import RCLONE_TYPES, decoded, missing_keys, prefix

MINIMUM_OPERATOR = (1, 17, 1)
OPERATOR_LABEL = "control-plane=seldon-controller-manager"  # on the operator's Deployment and seldon-config (Helm, kustomize)
VERSION_LABEL = "app.kubernetes.io/version"
# The operator's settings that route a SeldonDeployment's traffic (Helm: istio.enabled, ambassador.enabled).
INGRESS_SETTINGS = ("ISTIO_ENABLED", "AMBASSADOR_ENABLED")
# What to install when the cluster does not serve a kind we render.
PROVIDERS = {
    "SeldonDeployment": "the Seldon Core operator, 1.17.1 or later",
    "PodMonitor": "the Prometheus operator (or drop podmonitor.yaml in your overlay)",
    "ScaledObject": "KEDA",
}


def _required_kinds(docs: list[dict]) -> set[tuple[str, str]]:
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in docs}
    if any(
        component.get("kedaSpec")
        for doc in docs
        if doc["kind"] == "SeldonDeployment"
        for predictor in doc["spec"]["predictors"]
        for component in predictor.get("componentSpecs", [])
    ):
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


def _operator_containers(api) -> Iterator[tuple[str, Any]]:
    """("Deployment ns/name", container) for each Seldon operator container the cluster shows this user."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        deployments = client.AppsV1Api(api).list_deployment_for_all_namespaces(label_selector=OPERATOR_LABEL).items
    except ApiException as err:
        if err.status != 403:
            raise
        return
    for deployment in deployments:
        metadata = present(deployment.metadata)
        pod_spec = present(present(deployment.spec).template.spec)
        for container in pod_spec.containers:
            if "seldon-core-operator" in (container.image or ""):
                yield f"Deployment {metadata.namespace}/{metadata.name}", container


def operator_versions(api) -> dict[str, str]:
    """Where the Seldon operator is installed -> the version it says it is (image tag, or Helm's version label)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    found: dict[str, str] = {}
    try:
        for where, container in _operator_containers(api):
            tag = container.image.rpartition(":")[2] if "@" not in container.image else ""
            if parse_version(tag):
                found[where] = tag
        if not found:
            for configmap in client.CoreV1Api(api).list_config_map_for_all_namespaces(label_selector=OPERATOR_LABEL).items:
                metadata = present(configmap.metadata)
                version = (metadata.labels or {}).get(VERSION_LABEL, "")
                if parse_version(version):
                    found[f"ConfigMap {metadata.namespace}/{metadata.name}"] = version
    except ApiException as err:
        if err.status != 403:
            raise
    return found


def check_operator(api) -> str | None:
    """Refuse an operator older than 1.17.1; the warning to print when its version cannot be read."""
    versions = operator_versions(api)
    minimum = ".".join(map(str, MINIMUM_OPERATOR))
    if not versions:
        return (
            f"cannot tell the Seldon Core operator's version (no Deployment or ConfigMap labelled {OPERATOR_LABEL} "
            f"is visible): Slipway needs {minimum} or later"
        )
    # every version found parses (operator_versions keeps no other)
    old = {
        where: version for where, version in versions.items() if (parse_version(version) or MINIMUM_OPERATOR) < MINIMUM_OPERATOR
    }
    if old:
        where, version = next(iter(old.items()))
        raise DeployError(
            f"the Seldon Core operator ({where}) is {version}; Slipway needs {minimum} or later, the first "
            f"that adds the model-download init container to custom images: upgrade it "
            f"(helm upgrade seldon-core seldon-core-operator --version {minimum})"
        )
    return None


def splits_traffic(docs: list[dict]) -> bool:
    return any(len(doc["spec"]["predictors"]) > 1 for doc in docs if doc["kind"] == "SeldonDeployment")


def check_ingress(api, docs: list[dict]) -> str | None:
    """Where a canary splits traffic, refuse an operator routing with neither Istio nor Ambassador; the warning to
    print where its settings cannot be read."""
    if not splits_traffic(docs):
        return None
    operators = list(_operator_containers(api))
    if not operators:
        return (
            "cannot see the Seldon operator's Deployment to check it routes traffic: a canary's split needs the "
            f"operator running with Istio or Ambassador ({' or '.join(INGRESS_SETTINGS)}=true)"
        )
    for where, container in operators:
        env = {item.name: item.value for item in container.env or [] if item.value is not None}
        if any(env.get(setting, "").lower() == "true" for setting in INGRESS_SETTINGS):
            return None
    values = " and ".join(f"{setting}={env.get(setting, 'unset')}" for setting in INGRESS_SETTINGS)
    raise DeployError(
        f"a canary splits traffic through Istio or Ambassador, and the Seldon operator ({where}) runs "
        f"with neither ({values}), so the "
        f"split would be ignored: install it with --set istio.enabled=true (or ambassador.enabled=true), "
        f"or deploy without OVERLAY=canary"
    )


def check_namespace_exists(api, namespace: str) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(api).read_namespace(namespace)
    except ApiException as err:
        if err.status == 404:
            raise DeployError(
                f"namespace {namespace!r} does not exist: create it (kubectl create namespace {namespace}) or pass NAMESPACE="
            ) from err
        if err.status != 403:  # may not read namespaces: the dry run still finds a missing one
            raise DeployError(f"cannot read namespace {namespace!r}: {err.status} {err.reason}") from err


def _secret(api, name: str, namespace: str, missing: str) -> dict[str, str] | None:
    """The Secret's decoded keys; None where this user may not read Secrets (the pods will say it);
    DeployError(`missing`) where it does not exist."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            raise DeployError(missing) from err
        if err.status == 403:
            return None
        raise
    return decoded(secret)


def check_secrets(api, docs: list[dict], namespace: str) -> None:
    for name, schemes in sorted(storage_secrets(docs).items()):
        scheme = sorted(schemes)[0]
        settings = _secret(
            api,
            name,
            namespace,
            (
                f"Secret {name!r} (the models' envSecretRefName) does not exist in namespace {namespace!r}: write it from "
                f"your environment's credentials with `make secret NAMESPACE={namespace}` (or kubectl -n {namespace} create "
                f"secret generic {name} --from-literal={prefix(scheme)}TYPE='{RCLONE_TYPES.get(scheme, scheme)}' ...)"
            ),
        )
        if settings is None:  # this user may not read the Secret (403): its keys go unchecked
            continue
        for scheme in sorted(schemes):
            if missing := missing_keys(scheme, settings):
                raise DeployError(
                    f"Secret {namespace}/{name} has no {', '.join(missing)}: the storage initializer "
                    f"(rclone) reads the {scheme}:// remote from {prefix(scheme)}* keys; write them from "
                    f"your environment with `make secret NAMESPACE={namespace}`"
                )


def env_secret_keys(docs: list[dict]) -> dict[str, set[str]]:
    """Each Secret the containers read a key of (`secretKeyRef`, not optional), with the keys: the repository
    API's token, say. A missing one leaves the pods in CreateContainerConfigError, after the wait."""
    from deployments.render import seldon

    needed: dict[str, set[str]] = {}
    for doc in docs:
        if doc["kind"] != "SeldonDeployment":
            continue
        for _, _, component in seldon.pod_specs(doc):
            for container in component.get("spec", {}).get("containers", []):
                for item in container.get("env", []):
                    ref = (item.get("valueFrom") or {}).get("secretKeyRef")
                    if ref and not ref.get("optional"):
                        needed.setdefault(ref["name"], set()).add(ref["key"])
    return needed


def check_env_secrets(api, docs: list[dict], namespace: str) -> None:
    for name, keys in sorted(env_secret_keys(docs).items()):
        settings = _secret(
            api,
            name,
            namespace,
            (
                f"Secret {name!r}, which the model containers read {', '.join(sorted(keys))} from, does not exist in "
                f"namespace {namespace!r}: create it, e.g. kubectl -n {namespace} create secret generic {name} "
                f"--from-literal={sorted(keys)[0]}=..."
            ),
        )
        if settings is not None and (missing := sorted(keys - set(settings))):
            raise DeployError(
                f"Secret {namespace}/{name} has no key {', '.join(missing)}, which the model containers "
                f"read: add it (kubectl -n {namespace} edit secret {name})"
            )


def preflight(api, docs: list[dict[str, Any]], namespace: str, *, check_images: bool = False) -> list[str]:
    """Everything the apply needs must already be there; raise DeployError naming what is missing; return warnings.
    `check_images`: also every model container's image must resolve in its registry (deployments/rollout/image_check.py)."""
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    check_namespace_exists(api, namespace)
    dynamic = dynamic_client(api, fresh=True)
    missing = []
    for api_version, kind in sorted(_required_kinds(docs)):
        try:
            dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            missing.append(f"{api_version} {kind} (install {PROVIDERS.get(kind, 'its operator')})")
    if missing:
        raise DeployError(f"the cluster does not serve {'; '.join(missing)}")
    seldon = any(doc["kind"] == "SeldonDeployment" for doc in docs)  # KServe's controller: deployments.kserve.rollout
    warnings = [warning for warning in (check_operator(api) if seldon else None, check_ingress(api, docs)) if warning]
    check_secrets(api, docs, namespace)
    check_env_secrets(api, docs, namespace)
    if check_images:
        from deployments.rollout.image_check import check_images as resolve_images

        resolve_images(docs)
    return warnings
