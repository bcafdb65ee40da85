"""Validate rendered manifests before any cluster sees them.

Layers: the SeldonDeployment CRD's own `v1` OpenAPI schema (jsonschema); the Kubernetes
schemas for core kinds (`kubernetes-validate --strict`, two versions); Seldon's rules that no
schema states (its admission webhook's, and what its operator does with our pod); Pod
Security "restricted" plus a read-only root filesystem for every pod we write; and the
resources' agreement with each other (the NetworkPolicy and PodMonitor select our pods and
name their ports, a standalone HPA scales a Deployment Seldon really creates).
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from deployments.render import seldon
from deployments.render.split import EXECUTOR_PORTS
from deployments.render.stopping import stop_errors
from slipway.paths import SELDON_CRD_SCHEMA

KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
AUTOSCALED_RESOURCES = ("cpu", "memory")
GPU_RESOURCE = "nvidia.com/gpu"
# Pod Security "restricted": the volume types it allows.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_CREDENTIAL_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)


@dataclass
class ValidationReport:
    checked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "errors": self.errors, "skipped": self.skipped}


def load_crd_schema(path: Path = SELDON_CRD_SCHEMA) -> dict[str, Any] | None:
    """The `v1` openAPIV3Schema of the SeldonDeployment CRD, or None when the file is absent.

    Each caller gets its own copy of a schema parsed once per file content: parsing the 2.4 MB CRD takes ~0.4 s even
    with libyaml, and one process (a test run, a command that renders several overlays) validates many times."""
    return crd_version_schema(path, "v1")


def crd_version_schema(path: Path, version: str) -> dict[str, Any] | None:
    """The openAPIV3Schema of one `version` of the CRD in `path` (a copy), or None when the file is absent."""
    if not Path(path).is_file():
        return None
    return copy.deepcopy(_version_schema(Path(path).read_text(), str(path), version))


@functools.lru_cache(maxsize=4)
def _version_schema(crd_text: str, path: str, wanted: str) -> dict[str, Any]:
    """One version's schema in a CRD's text, parsed once per content; `crd_version_schema` hands out copies of it."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 2.4 MB of CRD in a second, not twenty
    crd = yaml.load(crd_text, Loader=loader)
    for version in crd["spec"]["versions"]:
        if version["name"] == wanted:
            return version["schema"]["openAPIV3Schema"]
    raise ValueError(f"{path} has no {wanted} version")


# ---------------------------------------------------------------- Seldon's rules


def seldon_rule_errors(doc: dict[str, Any]) -> list[str]:
    """Seldon Core's rules for a SeldonDeployment served by our MLServer image."""
    name = doc.get("metadata", {}).get("name", "?")
    spec = doc.get("spec", {})
    errors = []
    if spec.get("protocol") != "v2":
        errors.append(f"{name}: spec.protocol must be v2 (Open Inference Protocol), got {spec.get('protocol')!r}")
    predictors = spec.get("predictors", [])
    if not predictors:
        errors.append(f"{name}: spec.predictors is empty")
    names = [p.get("name") for p in predictors]
    if len(set(names)) != len(names):
        errors.append(f"{name}: predictor names must be unique, got {names}")
    errors.extend(_traffic_errors(name, predictors))
    budgets = [f"{p.get('name')}/{i}" for p, i, c in seldon.pod_specs(doc) if c.get("pdbSpec")]
    if len(budgets) > 1:
        errors.append(
            f"{name}: pdbSpec on {budgets}: Seldon's budgets all select every pod of the deployment, and "
            "Kubernetes refuses to evict a pod covered by two; keep one"
        )
    for predictor in predictors:
        errors.extend(_predictor_errors(f"{name}/{predictor.get('name')}", predictor))
    return errors


def _traffic_errors(name: str, predictors: list[dict]) -> list[str]:
    """The webhook's traffic rules: several predictors add up to 100; a lone one is 100 when set."""
    serving = [p for p in predictors if not p.get("shadow")]
    traffic = [p.get("traffic", 0) for p in serving]
    if any(not 0 <= t <= 100 for t in traffic):
        return [f"{name}: predictor traffic must be between 0 and 100, got {traffic}"]
    if len(serving) > 1 and sum(traffic) != 100:
        return [f"{name}: predictor traffic must add up to 100, got {traffic}"]
    if len(serving) == 1 and 0 < sum(traffic) < 100:
        return [f"{name}: a single predictor's traffic must be 100 when set, got {traffic[0]}"]
    return []


def _predictor_errors(where: str, predictor: dict) -> list[str]:
    errors = []
    graph = predictor.get("graph", {})
    graph_name = graph.get("name")
    containers = {
        c.get("name"): c
        for _, _, comp in seldon.pod_specs({"spec": {"predictors": [predictor]}})
        for c in comp.get("spec", {}).get("containers", [])
    }
    if graph_name not in containers:
        errors.append(f"{where}: no container is named {graph_name!r} like graph.name, so Seldon would not run our image")
    if graph.get("children"):
        if predictor.get("annotations", {}).get(seldon.NO_ENGINE_ANNOTATION):
            errors.append(f"{where}: {seldon.NO_ENGINE_ANNOTATION} is only valid for a one-node graph")
    model_container = containers.get(graph_name, {})
    env = {item.get("name"): item for item in model_container.get("env", [])}
    owned = sorted(set(env) & set(seldon.OPERATOR_ENV))
    if owned:
        errors.append(
            f"{where}: env {owned} is set by the Seldon operator; setting it here makes Seldon 1.17 drop "
            "the container's other env vars. Declare the ports (http, grpc, metrics) instead"
        )
    ports = {p.get("name"): p.get("containerPort") for p in model_container.get("ports", [])}
    if model_container and ports != seldon.PORT_NAMES:
        errors.append(
            f"{where}: container {graph_name!r} must declare ports {seldon.PORT_NAMES} (Seldon routes to "
            f"them; the NetworkPolicy and PodMonitor name them), got {ports}"
        )
    for key, item in env.items():
        if _CREDENTIAL_NAME.search(key or "") and "value" in item:
            errors.append(
                f"{where}: env {key} holds a literal value; put credentials in a Secret "
                "(graph.envSecretRefName for storage) and never in a manifest"
            )
    for _, index, component in seldon.pod_specs({"spec": {"predictors": [predictor]}}):
        errors.extend(_component_errors(f"{where}/componentSpecs/{index}", component, graph_name))
    return errors


def _component_errors(where: str, component: dict, graph_name: str | None) -> list[str]:
    errors = []
    if component.get("hpaSpec") and component.get("kedaSpec"):
        errors.append(f"{where}: hpaSpec and kedaSpec both set; Seldon uses kedaSpec and ignores hpaSpec: keep one")
    if component.get("hpaSpec") or component.get("kedaSpec"):
        errors.extend(requests_errors(where, component.get("spec", {})))
    errors.extend(container_metric_errors(where, component.get("hpaSpec", {}).get("metricsv2", []), component.get("spec", {})))
    errors.extend(stop_errors(where, component.get("spec", {}), graph_name or ""))
    for container in component.get("spec", {}).get("containers", []):
        resources = container.get("resources", {})
        gpus = resources.get("limits", {}).get(GPU_RESOURCE)
        workers = next((e.get("value") for e in container.get("env", []) if e.get("name") == "MLSERVER_PARALLEL_WORKERS"), None)
        if gpus is not None and workers is not None and int(workers) > int(gpus):
            errors.append(
                f"{where}: {workers} MLServer workers on {gpus} GPU(s): each worker loads its own copy "
                "of the model onto the device; use one worker per GPU"
            )
        if container.get("name") == graph_name and GPU_RESOURCE in resources.get("requests", {}):
            if resources["requests"][GPU_RESOURCE] != resources.get("limits", {}).get(GPU_RESOURCE):
                errors.append(f"{where}: {GPU_RESOURCE} request and limit must be equal")
    return errors


def requests_errors(where: str, pod_spec: dict) -> list[str]:
    """An autoscaler computes utilization against requests: without them it never scales."""
    errors = []
    for container in pod_spec.get("containers", []):
        requests = container.get("resources", {}).get("requests", {})
        missing = [r for r in AUTOSCALED_RESOURCES if r not in requests]
        if missing:
            errors.append(
                f"{where}: container {container.get('name')!r} has no {'/'.join(missing)} request; "
                "an autoscaler cannot compute utilization without it, so it would never scale"
            )
    return errors


def container_metric_errors(where: str, metrics: list[dict], pod_spec: dict) -> list[str]:
    """A `ContainerResource` metric must name a container of the pod: the HPA finds no usage for any other and
    never scales (it reads the container's own request, so that container needs one of the resource)."""
    errors = []
    containers = {c.get("name"): c for c in pod_spec.get("containers", [])}
    for metric in metrics:
        if metric.get("type") != "ContainerResource":
            continue
        source = metric.get("containerResource", {})
        container, resource = source.get("container"), source.get("name")
        if container not in containers:
            errors.append(
                f"{where}: the HPA's {resource} metric reads container {container!r}, which the pod does not "
                f"have ({', '.join(map(repr, containers))}); name the model container"
            )
        elif source.get("target", {}).get("type") == "Utilization" and resource not in containers[container].get(
            "resources", {}
        ).get("requests", {}):
            errors.append(
                f"{where}: the HPA's {resource} utilization is measured against container {container!r}'s "
                f"{resource} request, which it does not set"
            )
    return errors


# ---------------------------------------------------------------- Pod Security


def pod_security_errors(where: str, pod_spec: dict) -> list[str]:
    """Pod Security Standard "restricted", plus a read-only root filesystem, for every container we write."""
    errors = []
    pod_context = pod_spec.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            errors.append(f"{where}: {flag} is not allowed")
    for volume in pod_spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            errors.append(f"{where}: volume {volume.get('name')!r} of type {sorted(kinds)} is not allowed")
    if pod_context.get("runAsUser") == 0:
        errors.append(f"{where}: pod runAsUser 0 (root) is not allowed")
    containers = [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]
    for container in containers:
        name = f"{where}: container {container.get('name')!r}"
        context = container.get("securityContext", {})
        if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
            errors.append(f"{name}: runAsNonRoot must be true (pod or container securityContext)")
        if context.get("runAsUser") == 0:
            errors.append(f"{name}: runAsUser 0 (root) is not allowed")
        if context.get("allowPrivilegeEscalation") is not False:
            errors.append(f"{name}: allowPrivilegeEscalation must be false")
        if context.get("privileged"):
            errors.append(f"{name}: privileged is not allowed")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            errors.append(f"{name}: capabilities must drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            errors.append(f"{name}: only NET_BIND_SERVICE may be added to capabilities")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            errors.append(f"{name}: seccompProfile must be RuntimeDefault (pod or container), got {seccomp!r}")
        if context.get("readOnlyRootFilesystem") is not True:
            errors.append(f"{name}: readOnlyRootFilesystem must be true (mount an emptyDir where it writes)")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            errors.append(f"{name}: hostPort is not allowed")
    return errors


# ---------------------------------------------------------------- resources agreeing with each other


def cross_resource_errors(docs: list[dict]) -> list[str]:
    """The NetworkPolicy, PodMonitor and standalone HPAs must fit the SeldonDeployment they serve."""
    errors = []
    sdeps = [doc for doc in docs if doc.get("kind") == seldon.KIND]
    pods = [
        (predictor, index, {**predictor.get("labels", {}), **component.get("metadata", {}).get("labels", {})}, component)
        for sdep in sdeps
        for predictor, index, component in seldon.pod_specs(sdep)
    ]
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        spec = doc.get("spec", {})
        if doc.get("kind") == "NetworkPolicy":
            selected = [p for p in pods if _selects(spec.get("podSelector", {}), p[2])]
            if not selected:
                errors.append(f"{label}: podSelector matches no predictor pod")
            admitted = {port.get("port") for rule in spec.get("ingress", []) for port in rule.get("ports", [])}
            graphs = any(predictor["graph"].get("children") for sdep in sdeps for predictor in sdep["spec"]["predictors"])
            expected = set(seldon.PORT_NAMES.values()) | (set(EXECUTOR_PORTS) if graphs else set())  # --split: the executor's
            if admitted != expected:
                errors.append(
                    f"{label}: must admit exactly the inference and metrics ports "
                    f"{sorted(expected)}, admits {sorted(admitted, key=str)}"
                )
            for rule in spec.get("ingress", []):
                if not rule.get("from"):
                    ports = sorted((port.get("port") for port in rule.get("ports", [])), key=str)
                    errors.append(
                        f"{label}: admits every source on ports {ports}; list who may call them under "
                        f"`from:` (the gateway's, the model's and the monitoring namespaces)"
                    )
        elif doc.get("kind") == "PodMonitor":
            if not any(_selects(spec.get("selector", {}), p[2]) for p in pods):
                errors.append(f"{label}: selector matches no predictor pod")
            for endpoint in spec.get("podMetricsEndpoints", []):
                if endpoint.get("port") != "metrics" or endpoint.get("path") != seldon.METRICS_PATH:
                    errors.append(
                        f"{label}: scrape port 'metrics' at {seldon.METRICS_PATH} (where Seldon points "
                        f"MLServer), got {endpoint.get('port')!r} at {endpoint.get('path')!r}"
                    )
        elif doc.get("kind") == "HorizontalPodAutoscaler":
            errors.extend(_standalone_hpa_errors(label, doc, sdeps))
    return errors


def _selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels", {})
    return bool(match) and all(labels.get(key) == value for key, value in match.items())


def _standalone_hpa_errors(label: str, hpa: dict, sdeps: list[dict]) -> list[str]:
    target = hpa.get("spec", {}).get("scaleTargetRef", {})
    if target.get("kind") == seldon.KIND:
        return [
            f"{label}: a SeldonDeployment's scale subresource has no label selector, so an HPA cannot read pod "
            "metrics through it; target the predictor's Deployment (components/autoscaling-behavior)"
        ]
    for sdep in sdeps:
        for predictor, index, component in seldon.pod_specs(sdep):
            if target.get("kind") == "Deployment" and target.get("name") == seldon.deployment_name(
                sdep["metadata"]["name"], predictor, index
            ):
                errors = requests_errors(label, component.get("spec", {}))
                errors += container_metric_errors(label, hpa.get("spec", {}).get("metrics", []), component.get("spec", {}))
                if component.get("hpaSpec") or component.get("kedaSpec"):
                    errors.append(
                        f"{label}: predictor {predictor['name']!r} has its own hpaSpec/kedaSpec; two "
                        "autoscalers on one Deployment fight: keep one"
                    )
                if predictor.get("replicas") is not None or component.get("replicas") is not None:
                    errors.append(
                        f"{label}: predictor {predictor['name']!r} sets replicas, which Seldon re-applies "
                        "over the HPA's; remove them"
                    )
                return errors
    return [f"{label}: scaleTargetRef {target} is not a Deployment Seldon creates for any predictor"]


# ---------------------------------------------------------------- all layers


def validate_documents(
    docs: list[dict[str, Any]], *, crd_schema: dict | None = None, crd_path: Path = SELDON_CRD_SCHEMA
) -> ValidationReport:
    """Validate every rendered resource; errors name the resource and the field."""
    import jsonschema

    report = ValidationReport()
    schema = crd_schema if crd_schema is not None else load_crd_schema(crd_path)
    for doc in docs:
        label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "Secret":
            report.errors.append(f"{label}: manifests carry no Secrets; create it in the cluster and reference it by name")
        if doc.get("apiVersion") == seldon.API_VERSION:
            if schema is None:
                report.skipped.append(f"{label}: CRD schema not found at {crd_path}; set SLIPWAY_SELDON_CRD")
            else:
                for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
                    report.errors.append(f"{label}: {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}")
            report.errors.extend(seldon_rule_errors(doc))
            for predictor, index, component in seldon.pod_specs(doc):
                where = f"{label}/{predictor.get('name')}/componentSpecs/{index}"
                report.errors.extend(pod_security_errors(where, component.get("spec", {})))
            schema_layer = "" if schema is None else "CRD v1 schema, "  # a skipped layer is not claimed as checked
            report.checked.append(f"{label} ({schema_layer}Seldon rules, Pod Security restricted)")
            continue
        if doc.get("kind") == "PodMonitor":
            report.checked.append(f"{label} (Slipway rules; no Prometheus-operator schema here)")
            continue
        report.errors.extend(core_kind_errors(doc, label))
        report.checked.append(f"{label} (Kubernetes {', '.join(KUBERNETES_VERSIONS)} strict)")
    report.errors.extend(cross_resource_errors(docs))
    return report


def core_kind_errors(doc: dict[str, Any], label: str) -> list[str]:
    """A built-in kind against the Kubernetes schemas of every version in KUBERNETES_VERSIONS, unknown fields refused."""
    import kubernetes_validate

    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(map(str, err.path)) or "<root>"
            errors.append(f"{label}: Kubernetes {version}: {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{label}: Kubernetes {version} has no schema for {doc.get('apiVersion')} {doc.get('kind')}")
    return errors
