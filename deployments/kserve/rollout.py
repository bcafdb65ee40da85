"""The KServe steps of a rollout (`deployments.rollout.sequence`): what must be on the cluster, and when it serves.

Before anything is sent: a KServe controller (its `inferenceservice-config` ConfigMap, which the controller will not
start without) and the storage Secret the rendered ServiceAccount lists, in KServe's form; without them the
InferenceService would be stored and never reconciled, or its pods never created. After the apply: the
InferenceService Ready (KServe's own conditions: the predictor's Deployment available, its address set) and every
Ready predictor pod carrying the version's digest, which `Ready` alone does not say while the previous version's
pods still serve.
"""

from __future__ import annotations

from collections.abc import Callable

from deployments.kserve import api as kserve
from deployments.rollout.apply import DeployError, pods_waiting, wait_for
from deployments.rollout.kube_api import dynamic_client

CONTROLLER_NAMESPACE = "kserve"  # where KServe's install puts its controller and ConfigMap (constants.KServeNamespace)
CONTROLLER_CONFIGMAP = "inferenceservice-config"


def is_kserve(docs: list[dict]) -> bool:
    return any(doc["kind"] == kserve.ISVC_KIND for doc in docs)


def pod_selector(name: str) -> str:
    """The labels KServe puts on the predictor pods of InferenceService `name`."""
    return f"{kserve.ISVC_POD_LABEL}={name},{kserve.COMPONENT_LABEL}={kserve.PREDICTOR_COMPONENT}"


def storage_secret(docs: list[dict]) -> str | None:
    """The Secret the predictor's ServiceAccount lists (the storage initializer's credentials), if any."""
    isvc = next(doc for doc in docs if doc["kind"] == kserve.ISVC_KIND)
    account = isvc["spec"]["predictor"].get("serviceAccountName")
    for doc in docs:
        if doc["kind"] == "ServiceAccount" and doc["metadata"]["name"] == account:
            return next((secret["name"] for secret in doc.get("secrets") or []), None)
    return None


def check_cluster(api, docs: list[dict], namespace: str) -> list[str]:
    """Raise DeployError where no KServe controller is installed or the storage Secret is missing or not in KServe's
    form; return what could not be checked (this user may not read them)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from deployments.kserve.render import STORAGE_SECRET

    core, warnings = client.CoreV1Api(api), []
    try:
        core.read_namespaced_config_map(CONTROLLER_CONFIGMAP, CONTROLLER_NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            raise DeployError(
                f"the cluster serves InferenceService but has no KServe controller (no ConfigMap {CONTROLLER_NAMESPACE}/"
                f"{CONTROLLER_CONFIGMAP}), so nothing would create its pods: install KServe {kserve.KSERVE_VERSION} "
                "(a local cluster: make cluster KSERVE=1)"
            ) from err
        if err.status != 403:
            raise
        warnings.append(f"cannot read ConfigMap {CONTROLLER_NAMESPACE}/{CONTROLLER_CONFIGMAP}: KServe's controller unchecked")
    secret = storage_secret(docs)
    if secret is None:
        return warnings
    try:
        data = core.read_namespaced_secret(secret, namespace).data or {}
    except ApiException as err:
        if err.status == 404:
            raise DeployError(
                f"Secret {secret!r} (listed by the predictor's ServiceAccount for KServe's storage initializer) does not "
                f"exist in namespace {namespace!r}: write it from your environment's credentials with `make secret "
                f"ENGINE=kserve NAMESPACE={namespace}`"
                + (f" (or pass the name of yours to render as {STORAGE_SECRET})" if secret != STORAGE_SECRET else "")
            ) from err
        if err.status != 403:
            raise
        return [*warnings, f"cannot read Secret {namespace}/{secret}: its keys unchecked"]
    if missing := [key for key in kserve.S3_KEYS if key not in data]:
        raise DeployError(
            f"Secret {namespace}/{secret} has no {', '.join(missing)}: KServe's storage initializer reads S3 keys "
            f"there; write them with `make secret ENGINE=kserve NAMESPACE={namespace}`"
        )
    return warnings


def _condition_waiting(status: dict, generation: int) -> list[str]:
    """What KServe's status says is not done yet: nothing once it is Ready for the current generation."""
    conditions = {condition["type"]: condition for condition in status.get("conditions") or []}
    ready = conditions.get("Ready", {})
    if ready.get("status") == "True" and (status.get("observedGeneration") or generation) >= generation:
        return []
    pending = [c for c in conditions.values() if c.get("type") != "Ready" and c.get("status") != "True"]
    shown = pending[0] if pending else ready
    detail = ": ".join(part for part in (shown.get("reason"), shown.get("message")) if part)
    return [f"KServe says {shown.get('type', 'Ready')} is not True yet{f' ({detail})' if detail else ''}"]


def wait_ready(
    api, *, namespace: str, name: str, digest: str, timeout_s: float, on_state: Callable[[str], None] = lambda state: None
) -> dict:
    """Poll until InferenceService `name` is Ready and the predictor's Ready pods all carry `digest`; its status.
    Raise DeployError when `timeout_s` passes, saying what was still pending."""
    resource = dynamic_client(api).resources.get(api_version=kserve.ISVC_API_VERSION, kind=kserve.ISVC_KIND)

    def pending(isvc: dict) -> list[str]:
        waiting = _condition_waiting(isvc.get("status") or {}, isvc["metadata"].get("generation") or 1)
        return waiting + pods_waiting(
            api,
            namespace,
            selector=pod_selector(name),
            label=kserve.PREDICTOR_COMPONENT,
            digest=digest,
            not_created="KServe has not created its Deployment yet",
        )

    return wait_for(
        lambda: resource.get(name=name, namespace=namespace).to_dict(),
        pending,
        timeout_s=timeout_s,
        done="Ready",
        late=f"InferenceService {namespace}/{name} is not Ready with the new version",
        describe=f"kubectl describe isvc {name} -n {namespace}",
        on_state=on_state,
    )
