"""Apply rendered manifests to the current kubectl context with server-side apply, wait, remove.

Nothing is half-applied: after the preflight (`deployments.rollout.preflight`) every resource goes
through a server-side dry run, Seldon's admission webhook included; only when all of them
pass is anything applied. The wait ends when the Ready pods serve the version just applied.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deployments.render.overlay import COMMON_LABELS, MANAGED_BY
from deployments.render.seldon import DEPLOYMENT_ID_LABEL, MODEL_LABEL
from deployments.rollout.kube_api import dynamic_client, present
from slipway.local_cluster import running_kubeconfig

FIELD_MANAGER = "slipway"
POLL_INTERVAL_S = 2.0
# The object that serves a model, per engine (render --engine): the one kind each engine's model has exactly one of.
ENGINE_KINDS = {
    "seldon": ("machinelearning.seldon.io/v1", "SeldonDeployment"),
    "kserve": ("serving.kserve.io/v1beta1", "InferenceService"),
}
# Kinds `undeploy` removes, found by our labels. Seldon deletes what it created (Deployments,
# Services, its HPAs and budgets) with the SeldonDeployment, KServe what it created with the InferenceService (the
# runtime after it, which the controller reads while it still reconciles).
OWNED_KINDS = (
    *ENGINE_KINDS.values(),
    ("serving.kserve.io/v1alpha1", "ServingRuntime"),
    ("policy/v1", "PodDisruptionBudget"),  # KServe's rendering's own budget (Seldon's is the operator's)
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("keda.sh/v1alpha1", "ScaledObject"),  # KServe's rendering's own (Seldon's is the operator's); KEDA's HPA goes with it
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),  # the Grafana dashboard (--dashboard)
    ("monitoring.coreos.com/v1", "PrometheusRule"),  # the SLO's alerts (`alerts`), once applied: no model, no alerts
)


class ClusterUnavailable(RuntimeError):
    """No kubeconfig, or the cluster it names does not answer."""


class DeployError(RuntimeError):
    """The cluster answered but refused or did not finish; the message says what to fix."""


def connect(timeout_s: float = 5.0, on_note: Callable[[str], None] = lambda note: None):
    """An API client for the current context, after checking the cluster answers.

    Without KUBECONFIG, a running local cluster (`make cluster`) is the context, and `on_note` says so.
    """
    import os

    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    local = None if os.environ.get("KUBECONFIG") else running_kubeconfig()
    if local is not None:
        on_note(f"using the local cluster (KUBECONFIG={local}); set KUBECONFIG to deploy elsewhere")
    try:
        config.load_kube_config(config_file=str(local) if local else None)
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


def apply(api, docs: list[dict[str, Any]], *, namespace: str, dry_run: bool = False) -> list[str]:
    """Server-side apply every resource: all as a dry run first, then (unless `dry_run`) for real."""
    from kubernetes.client.exceptions import ApiException

    dynamic = dynamic_client(api)

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
                raise DeployError(f"{label} {stage}: {err.status} {err.reason}: {api_message(err)}") from err
    return [f"{doc['kind']}/{doc['metadata']['name']}" for doc in docs]


def api_message(err) -> str:
    import json

    try:
        return json.loads(err.body).get("message", "")
    except (TypeError, ValueError):
        return str(err.body or "")[:300]


DIGEST_ANNOTATION = "slipway.io/model-digest"  # render puts it on each predictor; Seldon copies it onto the pods


def pods_waiting(
    api, namespace: str, *, selector: str, label: str, digest: str, not_created: str, service: str | None = None
) -> list[str]:
    """What keeps the Deployments and pods matching `selector` (one predictor's, `label` in the lines) from serving
    `digest`: none yet (`not_created` says so), a Deployment mid-rollout or below its HPA's minimum (an operator
    creates it with one replica; the HPA raises that within a sync), Ready pods of another version, and where
    `service` is given, Ready pods its Endpoints do not list yet."""
    from kubernetes import client

    waiting = []
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=selector).items
    if not deployments:
        return [f"{label}: {not_created}"]
    minimum = {
        hpa.spec.scale_target_ref.name: hpa.spec.min_replicas or 1
        for hpa in client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
        if hpa.spec.scale_target_ref.kind == "Deployment"
    }
    for deployment in deployments:
        metadata, status = present(deployment.metadata), present(deployment.status)
        wanted = max(deployment.spec.replicas or 0, minimum.get(metadata.name or "", 0))
        if (
            (status.observed_generation or 0) < present(metadata.generation)
            or (status.updated_replicas or 0) < wanted
            or (status.replicas or 0) != wanted
            or (status.available_replicas or 0) < wanted
        ):
            waiting.append(
                f"{label}: Deployment {metadata.name} has {status.updated_replicas or 0} of "
                f"{wanted} replicas updated, {status.available_replicas or 0} available"
            )
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    ready = [
        pod
        for pod in pods
        if present(pod.metadata).deletion_timestamp is None
        and any(condition.type == "Ready" and condition.status == "True" for condition in (present(pod.status).conditions or []))
    ]
    stale = [
        present(present(pod.metadata).name)
        for pod in ready
        if (present(pod.metadata).annotations or {}).get(DIGEST_ANNOTATION) != digest
    ]
    if not ready:
        waiting.append(f"{label}: no pod is Ready")
    elif stale:
        waiting.append(f"{label}: {len(stale)} of {len(ready)} Ready pods serve another version ({', '.join(stale)})")
    elif service:
        waiting += _unrouted(api, namespace, service, label, [present(pod.metadata).name for pod in ready])
    return waiting


def _unrouted(api, namespace: str, service: str, label: str, pods: list[str | None]) -> list[str]:
    """What `service`'s Endpoints do not yet route to of the Ready `pods`: a pod is Ready before the endpoints
    controller lists it, and an ingress or kube-proxy sends it nothing (or refuses) until then."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        endpoints = client.CoreV1Api(api).read_namespaced_endpoints(service, namespace)
    except ApiException as err:
        if err.status == 404:
            return [f"{label}: Service {service} has no Endpoints yet"]
        raise
    routed = {
        address.target_ref.name
        for subset in endpoints.subsets or []
        for address in subset.addresses or []
        if address.target_ref is not None
    }
    missing = sorted(pod or "" for pod in pods if pod not in routed)
    return [f"{label}: Service {service} does not route to Ready pods {', '.join(missing)} yet"] if missing else []


def wait_for(
    read: Callable[[], dict],
    pending: Callable[[dict], list[str]],
    *,
    timeout_s: float,
    done: str,
    late: str,
    describe: str,
    on_state: Callable[[str], None],
) -> dict:
    """Read the object (`read`) every POLL_INTERVAL_S until `pending` says nothing keeps it from serving; its status.
    Each read's state goes to `on_state`: what is pending, or `done`. When `timeout_s` passes, raise DeployError:
    `late` (the object and what it has not done) after how long, what was still pending, and `describe` to see more."""
    deadline = time.monotonic() + timeout_s
    waiting: list[str] = []
    while time.monotonic() < deadline:
        found = read()
        waiting = pending(found)
        on_state("; ".join(waiting) or done)
        if not waiting:
            return found.get("status") or {}
        time.sleep(POLL_INTERVAL_S)
    raise DeployError(f"{late} after {timeout_s:.0f}s ({'; '.join(waiting)}); see {describe}")


def wait_rolled_out(
    api,
    *,
    namespace: str,
    name: str,
    digests: dict[str, str],
    timeout_s: float,
    on_state: Callable[[str], None] = lambda state: None,
    routed: bool = False,
) -> dict:
    """Poll until Seldon reports the SeldonDeployment Available and every predictor's Ready pods carry its digest
    (`routed`: and its Service's Endpoints list them, as before a predictor is given a share of traffic);
    return its status.

    `Available` alone can be the previous version's: Seldon keeps it while a rollout runs.
    Raise DeployError on Failed or when `timeout_s` passes, saying what was still pending.
    """
    resource = dynamic_client(api).resources.get(api_version="machinelearning.seldon.io/v1", kind="SeldonDeployment")

    def pending(sdep: dict) -> list[str]:
        status = sdep.get("status") or {}
        state, description = status.get("state", "Creating"), status.get("description", "")
        stale = _removed_service(sdep, name, description) if state == "Failed" else None
        if state == "Failed" and (stale is None or not _forget_removed_service(api, resource, sdep, stale)):
            raise DeployError(f"SeldonDeployment {namespace}/{name} Failed: {description}")
        waiting = [] if state == "Available" else [f"Seldon says {state}{': ' + description if description else ''}"]
        for predictor, digest in digests.items():
            waiting += pods_waiting(
                api,
                namespace,
                selector=f"{DEPLOYMENT_ID_LABEL}={name},slipway.io/predictor={predictor}",
                label=predictor,
                digest=digest,
                not_created="Seldon has not created its Deployment yet",
                service=f"{name}-{predictor}" if routed else None,
            )
        return waiting

    return wait_for(
        lambda: resource.get(name=name, namespace=namespace).to_dict(),
        pending,
        timeout_s=timeout_s,
        done="Available",
        late=f"SeldonDeployment {namespace}/{name} has not rolled out",
        describe=f"kubectl describe sdep {name} -n {namespace}",
        on_state=on_state,
    )


def _removed_service(sdep: dict, name: str, description: str) -> str | None:
    """The Service a Failed state names as not found, where it belonged to a predictor no longer in the spec."""
    missing = re.search(r'Service "([^"]+)" not found', description)
    kept = {f"{name}-{predictor['name']}" for predictor in sdep.get("spec", {}).get("predictors", [])}
    if missing is None or not missing.group(1).startswith(f"{name}-") or missing.group(1) in kept:
        return None
    return missing.group(1)


def _forget_removed_service(api, resource, sdep: dict, service: str) -> bool:
    """Seldon 1.17.1's operator removes a predictor's Services by deleting each one, then writing the status without
    it; where that status write loses to a change of the object made meanwhile (a canary's weights), the status still
    lists a Service that is gone, and every reconcile after stops at it ("Failed to find old service") and reports
    Failed for good. Where the Service is indeed gone, drop it from the status (the status subresource, only if the
    object is as read), so that the next reconcile goes on; whether it was dropped."""
    from kubernetes import client
    from kubernetes.client import ApiException

    if service not in (sdep.get("status") or {}).get("serviceStatus", {}):
        return False
    metadata = sdep["metadata"]
    try:
        client.CoreV1Api(api).read_namespaced_service(service, metadata["namespace"])
        return False  # still there: a failure of another kind
    except ApiException as err:
        if err.status != 404:
            raise
    try:
        resource.status.patch(
            name=metadata["name"],
            namespace=metadata["namespace"],
            body=[
                {"op": "test", "path": "/metadata/resourceVersion", "value": metadata["resourceVersion"]},
                {"op": "remove", "path": f"/status/serviceStatus/{service.replace('~', '~0').replace('/', '~1')}"},
            ],
            content_type="application/json-patch+json",
        )
    except ApiException as err:
        if err.status not in (409, 422):  # changed since it was read: the next poll looks again
            raise
    return True


FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # kwok's nodes: pods are Ready there, but no container runs


def ask_served(api, *, namespace: str, name: str, predictors: dict[str, str], timeout_s: float = 60.0) -> list[str]:
    """Ask each predictor's Service for its model's metadata (`ask_service`); return a line per predictor."""
    return [
        ask_service(
            api,
            namespace=namespace,
            label=predictor,
            service=f"{name}-{predictor}",
            selector=f"{DEPLOYMENT_ID_LABEL}={name},slipway.io/predictor={predictor}",
            model=model,
            container=model,
            timeout_s=timeout_s,
        )
        for predictor, model in predictors.items()
    ]


def ask_service(
    api, *, namespace: str, label: str, service: str, selector: str, model: str, container: str, timeout_s: float = 60.0
) -> str:
    """Ask `service` (port `http`) for `model`'s metadata (`GET /v2/models/<model>`, through the API server's service
    proxy) until it answers 200; return what was learnt, in a line starting with `label`.

    Ready pods say the kubelet's probes passed; this says the Service routes to a server that has the model
    loaded. Where the pods (`selector`) sit on kwok's nodes no container runs to answer, and it says so instead of
    asking."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    nodes = {node for pod in pods if (node := present(pod.spec).node_name)}
    if nodes and all((present(core.read_node(node).metadata).annotations or {}).get(FAKE_NODE_ANNOTATION) for node in nodes):
        return (
            f"{label}: its pods are on kwok's nodes, where no container runs: /v2/models/{model} "
            f"was not asked through Service {service}"
        )
    deadline, last = time.monotonic() + timeout_s, ""
    while True:
        try:
            # the raw urllib3 response (`_preload_content=False`), which the client's types call a str
            answer: Any = core.connect_get_namespaced_service_proxy_with_path(
                f"{service}:http", namespace, f"v2/models/{model}", _preload_content=False
            )
            metadata = json.loads(answer.data)
            return f"{label}: Service {service} answers /v2/models/{model} (versions {metadata.get('versions') or 'unnamed'})"
        except ApiException as err:
            last = f"{err.status} {err.reason}"
            if err.status == 403:
                return f"{label}: may not use the API server's service proxy (403): /v2/models/{model} not asked"
        if time.monotonic() > deadline:
            raise DeployError(
                f"the pods are Ready, but Service {namespace}/{service} does not answer "
                f"/v2/models/{model} after {timeout_s:.0f}s ({last}): kubectl logs -n {namespace} "
                f"-l {selector} -c {container}"
            )
        time.sleep(POLL_INTERVAL_S)


# What Seldon's operator makes for a SeldonDeployment and KServe's for an InferenceService (owned by them), and the
# pods under them (by the label each puts on its pods): `undeploy` waits for these.
CHILD_KINDS = (
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "Ingress"),  # KServe's, where its ingress creation is on
)
POD_LABELS = {"SeldonDeployment": DEPLOYMENT_ID_LABEL, "InferenceService": "serving.kserve.io/inferenceservice"}
UNDEPLOY_TIMEOUT_S = 180.0


@dataclass
class Deleted:
    """What `delete` removed, and the SeldonDeployments and InferenceServices among it (uid -> the label selector of
    their pods) whose children are still going."""

    names: list[str] = field(default_factory=list)
    owners: dict[str, str] = field(default_factory=dict)


def delete(api, *, namespace: str, model: str) -> Deleted:
    """Delete what Slipway applied for `model` in `namespace`, found by its labels, in the foreground: each object
    stays (with a deletion timestamp) until what it owns is gone, so that `wait_gone` can tell when all of it is."""
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

    dynamic = dynamic_client(api)
    selector = ",".join(f"{key}={value}" for key, value in {MANAGED_BY: COMMON_LABELS[MANAGED_BY], MODEL_LABEL: model}.items())
    deleted = Deleted()
    for api_version, kind in OWNED_KINDS:
        try:
            resource = dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            continue  # the cluster does not serve it, so we cannot have applied it
        for item in resource.get(namespace=namespace, label_selector=selector).items:
            try:
                resource.delete(name=item.metadata.name, namespace=namespace, body={"propagationPolicy": "Foreground"})
            except NotFoundError:
                continue
            deleted.names.append(f"{kind}/{item.metadata.name}")
            if kind in POD_LABELS:
                deleted.owners[item.metadata.uid] = f"{POD_LABELS[kind]}={item.metadata.name}"
    return deleted


def still_present(api, *, namespace: str, deleted: Deleted) -> list[str]:
    """Of what `delete` removed, what the API server still holds: the objects themselves, the operators' children
    of the SeldonDeployments and InferenceServices (owned by them), and their pods."""
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

    dynamic = dynamic_client(api)
    left = []
    for name in deleted.names:
        kind, _, object_name = name.partition("/")
        api_version = next(version for version, owned in OWNED_KINDS if owned == kind)
        try:
            dynamic.resources.get(api_version=api_version, kind=kind).get(name=object_name, namespace=namespace)
        except NotFoundError:
            continue
        left.append(name)
    owners = set(deleted.owners)
    for api_version, kind in CHILD_KINDS:
        try:
            resource = dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            continue
        for item in resource.get(namespace=namespace).items:
            if {ref.uid for ref in item.metadata.ownerReferences or []} & owners:
                left.append(f"{kind}/{item.metadata.name}")
    pods = dynamic.resources.get(api_version="v1", kind="Pod")
    for selector in deleted.owners.values():
        left += [f"Pod/{pod.metadata.name}" for pod in pods.get(namespace=namespace, label_selector=selector).items]
    return left


def wait_gone(
    api, *, namespace: str, deleted: Deleted, timeout_s: float = UNDEPLOY_TIMEOUT_S, poll_s: float = POLL_INTERVAL_S
) -> float:
    """Wait until nothing `delete` removed is left (`still_present`); the seconds it took. Raise DeployError naming
    what is left when `timeout_s` passes: a `deploy` started before then would race the garbage collector."""
    started = time.monotonic()
    while left := still_present(api, namespace=namespace, deleted=deleted):
        waited = time.monotonic() - started
        if waited >= timeout_s:
            shown = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
            raise DeployError(
                f"after {waited:.0f}s still present in namespace {namespace}: {shown}; see `kubectl get "
                f"deploy,svc,hpa,pdb,pods -n {namespace}` and their finalizers, or wait longer (--wait SECONDS)"
            )
        time.sleep(min(poll_s, max(0.0, timeout_s - waited)))
    return time.monotonic() - started
