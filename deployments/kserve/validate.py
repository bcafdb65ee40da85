"""Validate a KServe rendering offline: KServe's own CRD schemas, the rules its controller applies, Pod Security.

Layers: the ServingRuntime (v1alpha1) and InferenceService (v1beta1) against the openAPIV3Schema of KServe's CRDs
at the release Slipway renders for (cached from its Go module, `localcluster.components.KSERVE_CRDS`), with
fields the schema does not know refused (the API server would drop them without a word); KServe's rules that no
schema states (a runtime that speaks the protocol and format the model asks for, a storageUri the storage
initializer can pull, RawDeployment); Pod Security "restricted" on the pod KServe will build from both; the core
kinds against Kubernetes' schemas; and the resources' agreement (the HPA or KEDA's ScaledObject, one of them, scales
the predictor's Deployment, the HPA reads its model container, the budget, NetworkPolicy and PodMonitor select its
pods).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from deployments.kserve import api
from deployments.render import seldon
from deployments.render.stopping import stop_errors
from deployments.render.validate import (
    ValidationReport,
    _selects,
    container_metric_errors,
    core_kind_errors,
    crd_version_schema,
    pod_security_errors,
    requests_errors,
)
from slipway.local_cluster import component_dir

CRD_DIR_ENV = "SLIPWAY_KSERVE_CRDS"
CRD_FILES = {
    api.RUNTIME_KIND: ("crd-servingruntimes.yaml", "v1alpha1"),
    api.ISVC_KIND: ("crd-inferenceservices.yaml", "v1beta1"),
}
_POD_FIELDS_OF_PREDICTOR = ("model", "labels", "annotations", "minReplicas", "maxReplicas")


def crd_dir() -> Path:
    """`SLIPWAY_KSERVE_CRDS`, else the cluster cache's copy of KServe's CRDs (`make cluster-build`)."""
    if explicit := os.environ.get(CRD_DIR_ENV):
        return Path(explicit)
    return component_dir(api.CRDS_COMPONENT, api.KSERVE_VERSION) / "share"


def load_schemas(folder: Path | None = None) -> dict[str, dict | None]:
    """kind -> its CRD's openAPIV3Schema (None where the file is absent)."""
    folder = crd_dir() if folder is None else folder
    return {kind: crd_version_schema(folder / name, version) for kind, (name, version) in CRD_FILES.items()}


def unknown_fields(schema: dict, node: Any, path: str = "") -> list[str]:
    """Paths in `node` that `schema` does not declare: a structural schema prunes them on the API server."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found = []
    if isinstance(node, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, child in node.items():
            where = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                found += unknown_fields(properties[key], child, where)
            elif isinstance(extra, dict):
                found += unknown_fields(extra, child, where)
            elif properties is not None and path and not extra:
                found.append(where)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for index, child in enumerate(node):
            found += unknown_fields(schema["items"], child, f"{path}.{index}")
    return found


def _schema_errors(label: str, schema: dict, doc: dict) -> list[str]:
    import jsonschema

    errors = [
        f"{label}: {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in jsonschema.Draft7Validator(schema).iter_errors(doc)
    ]
    errors += [
        f"{label}: {where}: not a field of KServe's schema (the API server would drop it); check its spelling and place"
        for where in unknown_fields(schema, doc)
        if not where.startswith("metadata.")
    ]
    return errors


def runtime_errors(label: str, runtime: dict) -> list[str]:
    spec = runtime.get("spec", {})
    errors = []
    protocols = spec.get("protocolVersions")
    if protocols != [api.PROTOCOL]:
        errors.append(
            f"{label}: spec.protocolVersions must be [{api.PROTOCOL}] (MLServer speaks the Open Inference Protocol, "
            f"not v1 or grpc-v1), got {protocols!r}"
        )
    names = [c.get("name") for c in spec.get("containers", [])]
    if names != [api.CONTAINER_NAME]:
        errors.append(
            f"{label}: spec.containers must be one container named {api.CONTAINER_NAME!r} (KServe merges the "
            f"model into it by that name), got {names}"
        )
    for container in spec.get("containers", []):
        env = {item.get("name"): item.get("value") for item in container.get("env", [])}
        ports = {port.get("name"): port.get("containerPort") for port in container.get("ports", [])}
        if ports != seldon.PORT_NAMES:
            errors.append(f"{label}: the container's ports must be {seldon.PORT_NAMES} (http first), got {ports}")
        for name, port in (("MLSERVER_HTTP_PORT", "http"), ("MLSERVER_GRPC_PORT", "grpc"), ("MLSERVER_METRICS_PORT", "metrics")):
            if env.get(name) != str(seldon.PORT_NAMES[port]):
                errors.append(
                    f"{label}: {name} must be {seldon.PORT_NAMES[port]} (the {port} port; KServe does not set it), "
                    f"got {env.get(name)!r}"
                )
    return errors


def isvc_errors(label: str, isvc: dict, runtimes: dict[str, dict]) -> list[str]:
    metadata, predictor = isvc.get("metadata", {}), isvc.get("spec", {}).get("predictor", {})
    annotations = metadata.get("annotations", {})
    errors = []
    if annotations.get(api.DEPLOYMENT_MODE_ANNOTATION) != api.RAW_DEPLOYMENT:
        errors.append(
            f"{label}: annotation {api.DEPLOYMENT_MODE_ANNOTATION} must be {api.RAW_DEPLOYMENT} (no Knative or Istio "
            f"needed), got {annotations.get(api.DEPLOYMENT_MODE_ANNOTATION)!r}"
        )
    model = predictor.get("model")
    if not model:
        return [*errors, f"{label}: spec.predictor.model is missing: name the runtime, the format and the storageUri"]
    uri = model.get("storageUri")
    if not uri:
        errors.append(
            f"{label}: spec.predictor.model.storageUri is missing: the storage initializer would pull nothing; "
            "give the version's modelUri (s3://, gs://, pvc://)"
        )
    elif uri.split("://", 1)[0] not in api.STORAGE_SCHEMES or "://" not in uri:
        errors.append(f"{label}: storageUri {uri!r} is not one of {', '.join(s + '://' for s in api.STORAGE_SCHEMES)}")
    if model.get("protocolVersion") != api.PROTOCOL:
        errors.append(
            f"{label}: spec.predictor.model.protocolVersion must be {api.PROTOCOL} (the Open Inference Protocol "
            f"MLServer speaks), got {model.get('protocolVersion')!r}"
        )
    runtime = runtimes.get(model.get("runtime", ""))
    if runtime is None:
        errors.append(
            f"{label}: runtime {model.get('runtime')!r} is not among the rendered ServingRuntimes ({', '.join(runtimes)})"
        )
    else:
        spec = runtime.get("spec", {})
        formats = [f.get("name") for f in spec.get("supportedModelFormats", [])]
        if model.get("modelFormat", {}).get("name") not in formats:
            errors.append(
                f"{label}: model format {model.get('modelFormat', {}).get('name')!r} is not one runtime "
                f"{model.get('runtime')} supports ({formats})"
            )
        if model.get("protocolVersion") not in spec.get("protocolVersions", []):
            errors.append(
                f"{label}: runtime {model.get('runtime')} does not speak protocol {model.get('protocolVersion')!r} "
                f"({spec.get('protocolVersions')})"
            )
    return errors


def merged_pod(isvc: dict, runtime: dict | None) -> dict:
    """The pod spec KServe builds: the predictor's pod fields, the runtime's volumes and its container with the
    model's fields merged in (env by name)."""
    predictor = copy.deepcopy(isvc.get("spec", {}).get("predictor", {}))
    model = predictor.get("model", {})
    pod = {key: value for key, value in predictor.items() if key not in _POD_FIELDS_OF_PREDICTOR}
    spec = copy.deepcopy((runtime or {}).get("spec", {}))
    containers = spec.get("containers", [])
    for container in containers:
        if container.get("name") == api.CONTAINER_NAME:
            env = {item.get("name"): item for item in container.get("env", [])}
            env.update({item.get("name"): item for item in model.get("env", [])})
            container["env"] = list(env.values())
            if model.get("resources"):
                container["resources"] = model["resources"]
    pod["containers"] = containers
    pod["volumes"] = [*spec.get("volumes", []), *pod.get("volumes", [])]
    return pod


def pod_labels(isvc: dict) -> dict:
    return {
        **isvc.get("spec", {}).get("predictor", {}).get("labels", {}),
        api.ISVC_POD_LABEL: isvc.get("metadata", {}).get("name"),
        api.COMPONENT_LABEL: api.PREDICTOR_COMPONENT,
    }


def cross_resource_errors(docs: list[dict], pods: dict[str, tuple[dict, dict]]) -> list[str]:
    """`pods`: InferenceService name -> (its pods' labels, its merged pod spec)."""
    errors = []
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        spec = doc.get("spec", {})
        kind = doc.get("kind")
        if kind == "HorizontalPodAutoscaler":
            target = spec.get("scaleTargetRef", {})
            owner = next((name for name in pods if target.get("name") == api.predictor_name(name)), None)
            if target.get("kind") != "Deployment" or owner is None:
                errors.append(
                    f"{label}: scaleTargetRef {target} is not the predictor Deployment KServe creates "
                    f"({', '.join(api.predictor_name(name) for name in pods)})"
                )
                continue
            if doc.get("metadata", {}).get("name") == api.predictor_name(owner):
                errors.append(
                    f"{label}: KServe's controller takes an HPA named {api.predictor_name(owner)} over (its own HPA's "
                    f"name) and deletes it under autoscalerClass external; name it {api.hpa_name(owner)}"
                )
            errors += requests_errors(label, pods[owner][1])
            errors += container_metric_errors(label, spec.get("metrics", []), pods[owner][1])
        elif kind == api.SCALED_OBJECT_KIND:
            target = spec.get("scaleTargetRef", {})
            owner = next((name for name in pods if target.get("name") == api.predictor_name(name)), None)
            if target.get("kind", "Deployment") != "Deployment" or owner is None:
                errors.append(
                    f"{label}: scaleTargetRef {target} is not the predictor Deployment KServe creates "
                    f"({', '.join(api.predictor_name(name) for name in pods)})"
                )
            elif doc.get("metadata", {}).get("name") == api.predictor_name(owner):
                errors.append(
                    f"{label}: KServe's `keda` autoscaler class makes a ScaledObject of that name and updates it into "
                    f"its own; name it {api.scaled_object_name(owner)}"
                )
            if not spec.get("triggers"):
                errors.append(f"{label}: spec.triggers is empty: KEDA would scale on nothing; give the kedaSpec's triggers")
        elif kind in ("PodDisruptionBudget", "NetworkPolicy", "PodMonitor"):
            selector = spec.get("podSelector" if kind == "NetworkPolicy" else "selector", {})
            if not any(_selects(selector, labels) for labels, _ in pods.values()):
                errors.append(f"{label}: its selector matches no predictor pod of the InferenceService")
            if kind == "PodMonitor":
                for endpoint in spec.get("podMetricsEndpoints", []):
                    if endpoint.get("port") != "metrics" or endpoint.get("path") != seldon.METRICS_PATH:
                        errors.append(f"{label}: scrape port 'metrics' at {seldon.METRICS_PATH}, where the runtime serves them")
    scalers = [
        f"{d.get('kind')}/{d.get('metadata', {}).get('name')}"
        for d in docs
        if d.get("kind") in ("HorizontalPodAutoscaler", api.SCALED_OBJECT_KIND)
    ]
    if len(scalers) > 1:
        errors.append(f"{' and '.join(scalers)} both scale the predictor and would fight over its replicas: keep one")
    for doc in docs:
        if doc.get("kind") == api.ISVC_KIND:
            annotations = doc.get("metadata", {}).get("annotations", {})
            if scalers and annotations.get(api.AUTOSCALER_CLASS_ANNOTATION) != api.EXTERNAL_AUTOSCALER:
                errors.append(
                    f"InferenceService/{doc['metadata'].get('name')}: with Slipway's {scalers[0].split('/')[0]} rendered, "
                    f"annotation {api.AUTOSCALER_CLASS_ANNOTATION} must be {api.EXTERNAL_AUTOSCALER}, or KServe's own "
                    "HPA fights it"
                )
    return errors


def validate_kserve(docs: list[dict[str, Any]], *, schemas: dict[str, dict | None] | None = None) -> ValidationReport:
    """Validate every resource of a KServe rendering; errors name the resource and the field."""
    report = ValidationReport()
    schemas = load_schemas() if schemas is None else schemas
    runtimes = {d.get("metadata", {}).get("name"): d for d in docs if d.get("kind") == api.RUNTIME_KIND}
    pods: dict[str, tuple[dict, dict]] = {}
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        kind = doc.get("kind")
        if kind == "Secret":
            report.errors.append(f"{label}: manifests carry no Secrets; create it in the cluster and reference it by name")
        if kind in CRD_FILES:
            expected = api.RUNTIME_API_VERSION if kind == api.RUNTIME_KIND else api.ISVC_API_VERSION
            if doc.get("apiVersion") != expected:
                report.errors.append(f"{label}: apiVersion must be {expected}, got {doc.get('apiVersion')!r}")
            schema = schemas.get(kind)
            if schema is None:
                report.skipped.append(
                    f"{label}: KServe's CRD schema not found in {crd_dir()}; run `make cluster-build` or set {CRD_DIR_ENV}"
                )
            else:
                report.errors.extend(_schema_errors(label, schema, doc))
            if kind == api.RUNTIME_KIND:
                report.errors.extend(runtime_errors(label, doc))
            else:
                report.errors.extend(isvc_errors(label, doc, runtimes))
                runtime = runtimes.get(doc.get("spec", {}).get("predictor", {}).get("model", {}).get("runtime", ""))
                pod = merged_pod(doc, runtime)
                pods[doc.get("metadata", {}).get("name")] = (pod_labels(doc), pod)
                report.errors.extend(pod_security_errors(f"{label}/predictor", pod))
                report.errors.extend(stop_errors(f"{label}/predictor", pod, api.CONTAINER_NAME))
            layer = "" if schema is None else f"KServe {CRD_FILES[kind][1]} CRD schema, "
            report.checked.append(f"{label} ({layer}KServe rules, Pod Security restricted)")
        elif kind == "PodMonitor":
            report.checked.append(f"{label} (Slipway rules; no Prometheus-operator schema here)")
        elif kind == api.SCALED_OBJECT_KIND:
            if doc.get("apiVersion") != api.KEDA_API_VERSION:
                report.errors.append(f"{label}: apiVersion must be {api.KEDA_API_VERSION}, got {doc.get('apiVersion')!r}")
            report.checked.append(f"{label} (Slipway rules; KEDA's schema in the server-side dry run)")
        else:
            report.errors.extend(core_kind_errors(doc, label))
            report.checked.append(f"{label} (Kubernetes strict)")
    if not pods:
        report.errors.append("no InferenceService rendered: --engine kserve renders exactly one")
    report.errors.extend(cross_resource_errors(docs, pods))
    return report
