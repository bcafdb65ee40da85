"""Render one model version as a KServe ServingRuntime + InferenceService (RawDeployment), from the Seldon rendering.

The Seldon renderer does everything both engines share (the overlay's sizing, the image, the model's name, version
and digest, the closed repository API, JSON logs, the security context, GPU placement, the ServiceAccount, PodMonitor,
NetworkPolicy and dashboard); this module moves its one pod into KServe's two kinds and replaces Seldon's hpaSpec,
kedaSpec and pdbSpec by a standalone HPA on the predictor Deployment (CPU and memory of the model container, or rps's
per-pod request rate from prometheus-adapter, which serves it for any pod Prometheus scrapes), a KEDA ScaledObject
and a PodDisruptionBudget:

- ServingRuntime `slipway-<model>`: the model container (renamed `kserve-container`), its volumes, the ports MLServer
  listens on (which Seldon's operator would set), `protocolVersions: [v2]`.
- InferenceService `<model>`: the pod-level settings (service account, security context, spreading, placement), the
  version's `storageUri`, its digest pin, the version annotations and Slipway's labels on its pods; RawDeployment
  (no Knative, no Istio) and the `external` autoscaler class, so that KServe leaves scaling to the rendered HPA or
  ScaledObject.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.kserve import api
from deployments.render import autoscaling, seldon
from deployments.render.dashboard import is_dashboard
from deployments.render.overlay import COMMON_LABELS, Rendered, RenderError, RenderOptions, render
from deployments.render.seldon import MODEL_LABEL, PREDICTOR_LABEL
from deployments.render.stopping import native_sleep
from slipway.artifact import EXPECTED_DIGESTS_ENV

# The Secret the predictor's ServiceAccount lists for s3:// URIs, in KServe's form (AWS_* keys, s3-* annotations).
STORAGE_SECRET = "slipway-model-storage-kserve"
# How the dashboard's resource panels select the model container (as JSON text: quotes escaped).
DASHBOARD_CONTAINER_SELECTOR = 'container=\\"$model\\"'
# What MLServer is told to listen on; Seldon's operator sets these from the ports, KServe does not.
PORT_ENV = {
    "MLSERVER_HTTP_PORT": str(seldon.HTTP_PORT),
    "MLSERVER_GRPC_PORT": str(seldon.GRPC_PORT),
    "MLSERVER_METRICS_PORT": str(seldon.METRICS_PORT),
    "MLSERVER_METRICS_ENDPOINT": seldon.METRICS_PATH,
}


@dataclass
class KServeRendered(Rendered):
    """A KServe rendering: the same report fields as Seldon's, named after the InferenceService."""

    @property
    def name(self) -> str:
        return self.inference_service["metadata"]["name"]

    @property
    def inference_service(self) -> dict:
        return next(doc for doc in self.docs if doc["kind"] == api.ISVC_KIND)

    @property
    def inference_path(self) -> str:
        return api.inference_url(self.namespace, self.name, self.name)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "serving_engine": "kserve"}


def render_kserve(overlay: str | Path, options: RenderOptions, *, storage_secret: str = STORAGE_SECRET) -> KServeRendered:
    """Render `overlay` as Seldon would (`deployments.render.overlay.render`, with the same `options`), then as KServe's kinds."""
    if options.canary is not None or options.canary_percent is not None or str(overlay) == "canary":
        raise RenderError(
            "--engine kserve renders one version: a canary (two InferenceServices behind one route) is not rendered "
            "yet; use OVERLAY=cpu or gpu, or --engine seldon for the canary"
        )
    if options.split_mode is not None:
        raise RenderError("--split is a Seldon graph: with --engine kserve leave it out, or use --engine seldon")
    seldon_rendered = render(overlay, options)
    sdep = seldon_rendered.seldon_deployment
    model = seldon_rendered.models["default"] if "default" in seldon_rendered.models else None
    components = list(seldon.pod_specs(sdep))
    if model is None or len(components) != 1:
        raise RenderError(f"overlay {overlay} renders {len(components)} pods; --engine kserve renders one predictor with one pod")
    predictor, _, component = components[0]
    runtime, pod, container = _runtime(predictor, component, seldon_rendered.namespace)
    isvc = _inference_service(predictor, component, pod, container, model, seldon_rendered.namespace)
    docs: list[dict] = []
    for doc in seldon_rendered.docs:
        if doc["kind"] == seldon.KIND:
            docs += [runtime, isvc]
            if component.get("hpaSpec"):
                docs.append(_hpa(component["hpaSpec"], isvc))
            if component.get("kedaSpec"):
                docs.append(_scaled_object(component["kedaSpec"], isvc))
            if component.get("pdbSpec"):
                docs.append(_pdb(component["pdbSpec"], isvc))
        elif doc["kind"] == "HorizontalPodAutoscaler":  # --autoscaling behavior: the standalone HPA, retargeted
            docs.append(_retarget(doc, isvc))
        elif doc["kind"] == "ServiceAccount":
            docs.append(_service_account(doc, model.uri, storage_secret))
        elif is_dashboard(doc):
            docs.append(_dashboard(doc))
        else:
            docs.append(doc)
    return KServeRendered(
        docs=docs,
        overlay=seldon_rendered.overlay,
        namespace=seldon_rendered.namespace,
        autoscaling=seldon_rendered.autoscaling,
        engine=seldon_rendered.engine,
        models={"default": model},
        hpa_metric_source=seldon_rendered.hpa_metric_source,
        shared_memory=seldon_rendered.shared_memory,
        warnings=seldon_rendered.warnings,
    )


def _metadata(name: str, namespace: str, labels: dict, annotations: dict | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


def _runtime(predictor: dict, component: dict, namespace: str) -> tuple[dict, dict, dict]:
    """The ServingRuntime holding the model container and its volumes; the rest of the pod spec, and the container."""
    pod = copy.deepcopy(component.get("spec", {}))
    graph_name = predictor["graph"]["name"]
    containers = pod.pop("containers", [])
    others = [c["name"] for c in containers if c["name"] != graph_name]
    if others:
        raise RenderError(
            f"the pod has containers besides the model's ({', '.join(others)}): a KServe predictor runs one; "
            "remove them from the overlay or use --engine seldon"
        )
    container = next(c for c in containers if c["name"] == graph_name)
    container["name"] = api.CONTAINER_NAME
    env = [
        item
        for item in container.get("env", [])
        if item.get("name") not in PORT_ENV and item.get("name") != "MLSERVER_MODEL_NAME"
    ]
    env += [{"name": name, "value": value} for name, value in PORT_ENV.items()]
    env.append({"name": "MLSERVER_MODEL_NAME", "value": graph_name})  # the JSON logs' model_name before the first load
    container["env"] = env
    native_sleep(container)  # KServe reads the pod with Kubernetes 1.32's types: the hook needs no sleep binary
    labels = {**COMMON_LABELS, "app.kubernetes.io/name": graph_name, MODEL_LABEL: graph_name}
    spec: dict[str, Any] = {
        "supportedModelFormats": [{"name": api.MODEL_FORMAT, "version": "1", "autoSelect": False}],
        "protocolVersions": [api.PROTOCOL],
        "multiModel": False,
        "containers": [container],
    }
    if pod.get("volumes"):
        spec["volumes"] = pod.pop("volumes")
    runtime = {
        "apiVersion": api.RUNTIME_API_VERSION,
        "kind": api.RUNTIME_KIND,
        "metadata": _metadata(api.runtime_name(graph_name), namespace, labels),
        "spec": spec,
    }
    return runtime, pod, container


def _inference_service(predictor: dict, component: dict, pod: dict, container: dict, model, namespace: str) -> dict:
    """The InferenceService: the version (storageUri, digest pin), the pod-level settings, Slipway's pod labels."""
    # the runtime's container carries the version's digest pin: move it to the InferenceService, which names the version
    digest_env = [item for item in container["env"] if item.get("name") == EXPECTED_DIGESTS_ENV]
    container["env"] = [item for item in container["env"] if item.get("name") != EXPECTED_DIGESTS_ENV]
    annotations = {"slipway.io/model-version": model.version, "slipway.io/model-digest": model.digest}
    pod_annotations = {**component.get("metadata", {}).get("annotations", {}), **predictor.get("annotations", {})}
    pod_annotations.pop(seldon.NO_ENGINE_ANNOTATION, None)
    hpa = component.get("hpaSpec") or {}
    spec: dict[str, Any] = {
        **pod,
        "labels": {**predictor.get("labels", {}), MODEL_LABEL: model.name, PREDICTOR_LABEL: predictor["name"]},
        "annotations": pod_annotations,
        "model": {
            "modelFormat": {"name": api.MODEL_FORMAT},
            "runtime": api.runtime_name(model.name),
            "protocolVersion": api.PROTOCOL,
            "storageUri": model.uri,
            "env": digest_env,
        },
    }
    if hpa.get("minReplicas") is not None:
        spec["minReplicas"] = hpa["minReplicas"]  # the Deployment's first replica count; the HPA owns it after
    labels = {**COMMON_LABELS, "app.kubernetes.io/name": model.name, MODEL_LABEL: model.name}
    return {
        "apiVersion": api.ISVC_API_VERSION,
        "kind": api.ISVC_KIND,
        "metadata": _metadata(
            model.name,
            namespace,
            labels,
            {
                api.DEPLOYMENT_MODE_ANNOTATION: api.RAW_DEPLOYMENT,
                api.AUTOSCALER_CLASS_ANNOTATION: api.EXTERNAL_AUTOSCALER,
                **annotations,
            },
        ),
        "spec": {"predictor": spec},
    }


def _labels(isvc: dict) -> dict:
    return {**isvc["metadata"]["labels"], PREDICTOR_LABEL: "default"}


def _hpa(hpa_spec: dict, isvc: dict) -> dict:
    """Seldon's hpaSpec as a standalone autoscaling/v2 HPA on KServe's predictor Deployment: its `ContainerResource`
    metrics pinned to the model container, a `Pods` metric (rps's) as it is, read per pod of that Deployment."""
    name = isvc["metadata"]["name"]
    metrics = copy.deepcopy(hpa_spec.get("metricsv2", []))
    autoscaling.pin_model_container(metrics, api.CONTAINER_NAME, aliases=(name,))
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": api.predictor_name(name)},
        "minReplicas": hpa_spec.get("minReplicas", 1),
        "maxReplicas": hpa_spec["maxReplicas"],
        "metrics": metrics,
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(api.hpa_name(name), isvc["metadata"]["namespace"], _labels(isvc)),
        "spec": spec,
    }


def _scaled_object(keda_spec: dict, isvc: dict) -> dict:
    """Seldon's kedaSpec as KEDA's ScaledObject on KServe's predictor Deployment, as Seldon's operator makes it for its
    own Deployment (the kedaSpec's fields are the ScaledObject's; the trigger's query already names the pods' labels)."""
    name = isvc["metadata"]["name"]
    return {
        "apiVersion": api.KEDA_API_VERSION,
        "kind": api.SCALED_OBJECT_KIND,
        "metadata": _metadata(api.scaled_object_name(name), isvc["metadata"]["namespace"], _labels(isvc)),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": api.predictor_name(name)},
            **copy.deepcopy(keda_spec),
        },
    }


def _retarget(hpa: dict, isvc: dict) -> dict:
    hpa = copy.deepcopy(hpa)
    name = isvc["metadata"]["name"]
    hpa["metadata"]["name"] = api.hpa_name(name)
    hpa["spec"]["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": api.predictor_name(name)}
    autoscaling.pin_model_container(hpa["spec"].get("metrics", []), api.CONTAINER_NAME, aliases=(name,))
    return hpa


def _pdb(pdb_spec: dict, isvc: dict) -> dict:
    """Seldon's pdbSpec as a policy/v1 budget over the pods KServe labels as this InferenceService's predictor."""
    name = isvc["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(api.predictor_name(name), isvc["metadata"]["namespace"], _labels(isvc)),
        "spec": {
            **copy.deepcopy(pdb_spec),
            "selector": {"matchLabels": {api.ISVC_POD_LABEL: name, api.COMPONENT_LABEL: api.PREDICTOR_COMPONENT}},
        },
    }


def _dashboard(doc: dict) -> dict:
    """The dashboard's resource panels read the model container by name: KServe's is `kserve-container` (its pods,
    `<model>-predictor-...`, and the HPA, `<model>-predictor-hpa`, already match the panels' `$model-.+`)."""
    doc = copy.deepcopy(doc)
    for key, text in doc.get("data", {}).items():
        if DASHBOARD_CONTAINER_SELECTOR not in text:
            raise RenderError(
                f"the dashboard no longer selects the model container as {DASHBOARD_CONTAINER_SELECTOR}: "
                "update deployments/kserve/render.py with what it selects now"
            )
        kserve = text.replace(DASHBOARD_CONTAINER_SELECTOR, f'container=\\"{api.CONTAINER_NAME}\\"')
        doc["data"][key] = kserve.replace("on Seldon Core v1 + MLServer", "on KServe (RawDeployment) + MLServer")
    return doc


def _service_account(doc: dict, uri: str, secret: str) -> dict:
    """KServe finds S3 credentials in the Secrets the predictor's ServiceAccount lists (pkg/credentials)."""
    doc = copy.deepcopy(doc)
    if uri.startswith("s3://"):
        doc["secrets"] = [{"name": secret}]
    return doc
