"""Apply rendered manifests to the current kubectl context with server-side apply, wait, remove.

Nothing is half-applied: the cluster is asked first whether it answers, whether the namespace
exists and whether it serves every kind we send (Seldon, the Prometheus operator, KEDA); then
every resource goes through a server-side dry run; only when all of them pass is anything applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FIELD_MANAGER = "slipway"
POLL_INTERVAL_S = 2.0
# What to install when the cluster does not serve a kind we render.
PROVIDERS = {
    "SeldonDeployment": "the Seldon Core v1 operator",
    "PodMonitor": "the Prometheus operator (or drop podmonitor.yaml in your overlay)",
    "ScaledObject": "KEDA",
}
# Kinds `undeploy` removes, found by our labels. Seldon deletes what it created (Deployments,
# Services, its HPAs and budgets) with the SeldonDeployment.
OWNED_KINDS = (
    ("machinelearning.seldon.io/v1", "SeldonDeployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ServiceAccount"),
)


class ClusterUnavailable(RuntimeError):
    """No kubeconfig, or the cluster it names does not answer."""


class DeployError(RuntimeError):
    """The cluster answered but refused or did not finish; the message says what to fix."""


def connect(timeout_s: float = 5.0):
    """An API client for the current context, after checking the cluster answers."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_kube_config()
    except (ConfigException, FileNotFoundError, TypeError) as err:
        try:
            config.load_incluster_config()
        except ConfigException:
            raise ClusterUnavailable(f"no Kubernetes context is configured ({err})") from err
    api = client.ApiClient()
    try:
        client.VersionApi(api).get_code(_request_timeout=timeout_s)
    except Exception as err:  # urllib3 raises many connection error types
        host = api.configuration.host
        raise ClusterUnavailable(f"no Kubernetes cluster answers at {host} ({type(err).__name__})") from err
    return api


def _dynamic(api):
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(api)


def _required_kinds(docs: list[dict]) -> set[tuple[str, str]]:
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in docs}
    if any(component.get("kedaSpec") for doc in docs if doc["kind"] == "SeldonDeployment"
           for predictor in doc["spec"]["predictors"] for component in predictor.get("componentSpecs", [])):
        kinds.add(("keda.sh/v1alpha1", "ScaledObject"))
    return kinds


def preflight(api, docs: list[dict], namespace: str) -> None:
    """Everything the apply needs must already be there; raise DeployError naming what is missing."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        client.CoreV1Api(api).read_namespace(namespace)
    except ApiException as err:
        if err.status == 404:
            raise DeployError(f"namespace {namespace!r} does not exist: create it (kubectl create namespace {namespace}) "
                              "or pass NAMESPACE=") from err
        if err.status != 403:  # may not read namespaces: the dry run below still finds a missing one
            raise DeployError(f"cannot read namespace {namespace!r}: {err.status} {err.reason}") from err
    dynamic = _dynamic(api)
    missing = []
    for api_version, kind in sorted(_required_kinds(docs)):
        try:
            dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            missing.append(f"{api_version} {kind} (install {PROVIDERS.get(kind, 'its operator')})")
    if missing:
        raise DeployError(f"the cluster does not serve {'; '.join(missing)}")


def apply(api, docs: list[dict[str, Any]], *, namespace: str, dry_run: bool = False) -> list[str]:
    """Server-side apply every resource: all as a dry run first, then (unless `dry_run`) for real."""
    from kubernetes.client.exceptions import ApiException

    dynamic = _dynamic(api)

    def send(doc: dict, dry: bool) -> None:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs = {"body": doc, "name": doc["metadata"]["name"], "field_manager": FIELD_MANAGER, "force_conflicts": True}
        if resource.namespaced:
            kwargs["namespace"] = doc["metadata"].get("namespace", namespace)
        if dry:
            kwargs["dry_run"] = "All"
        resource.server_side_apply(**kwargs)

    for dry in (True,) if dry_run else (True, False):
        for doc in docs:
            label = f"{doc['kind']}/{doc['metadata']['name']}"
            try:
                send(doc, dry)
            except ApiException as err:
                stage = "refused in the server-side dry run, nothing was applied" if dry else "failed while applying"
                raise DeployError(f"{label} {stage}: {err.status} {err.reason}: {_api_message(err)}") from err
    return [f"{doc['kind']}/{doc['metadata']['name']}" for doc in docs]


def _api_message(err) -> str:
    import json

    try:
        return json.loads(err.body).get("message", "")
    except (TypeError, ValueError):
        return str(err.body or "")[:300]


def wait_available(api, *, namespace: str, name: str, timeout_s: float,
                   on_state: Callable[[str], None] = lambda state: None) -> None:
    """Poll the SeldonDeployment until Seldon reports it Available; raise DeployError on Failed or timeout."""
    resource = _dynamic(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")
    deadline = time.monotonic() + timeout_s
    state, description = "unknown", ""
    while time.monotonic() < deadline:
        status = (resource.get(name=name, namespace=namespace).to_dict().get("status") or {})
        state, description = status.get("state", "Creating"), status.get("description", "")
        on_state(state)
        if state == "Available":
            return
        if state == "Failed":
            raise DeployError(f"SeldonDeployment {namespace}/{name} Failed: {description}")
        time.sleep(POLL_INTERVAL_S)
    raise DeployError(f"SeldonDeployment {namespace}/{name} is not Available after {timeout_s:.0f}s "
                      f"(state {state}{': ' + description if description else ''}); "
                      f"see kubectl describe sdep {name} -n {namespace}")


def delete(api, *, namespace: str, model: str) -> list[str]:
    """Delete what Slipway applied for `model` in `namespace`, found by its labels."""
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

    dynamic = _dynamic(api)
    selector = f"app.kubernetes.io/managed-by=slipway,slipway.io/model={model}"
    deleted = []
    for api_version, kind in OWNED_KINDS:
        try:
            resource = dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            continue  # the cluster does not serve it, so we cannot have applied it
        for item in resource.get(namespace=namespace, label_selector=selector).items:
            try:
                resource.delete(name=item.metadata.name, namespace=namespace)
            except NotFoundError:
                continue
            deleted.append(f"{kind}/{item.metadata.name}")
    return deleted
