"""Render an overlay for one model version (two for a canary): kustomize, then pin.

Pinning fills in what the overlays leave as placeholders: the model's name everywhere it
names things or selects pods, each predictor's model URI and version annotations, the
image, the namespace, the canary's traffic share, the names a standalone HPA targets and the
model container each HPA's `ContainerResource` metrics read (`$(MODEL_CONTAINER)`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import TypeAdapter, ValidationError

from deployments.render import autoscaling, frontends, gpu, kustomize, placement, seldon, split
from deployments.render.dashboard import COMPONENT_DIR as DASHBOARD_COMPONENT
from deployments.render.dashboard import DashboardError, is_dashboard
from deployments.render.dashboard import pin as pin_dashboard
from deployments.render.quantities import memory_mib
from deployments.render.records import ModelVersion
from deployments.render.repository_api import RepositoryApiError, container_env, pin_env
from deployments.render.seldon import MODEL_LABEL, PREDICTOR_LABEL
from slipway import atomic
from slipway.artifact import EXPECTED_DIGESTS_ENV
from slipway.cluster_names import DEFAULT_NAMESPACE, NAMESPACE_ENV

DEPLOYMENTS_DIR = Path(__file__).resolve().parent.parent  # the shipped manifests sit in deployments/, beside this package
OVERLAYS_DIR = DEPLOYMENTS_DIR / "overlays"
OVERLAYS = ("cpu", "gpu", "canary")
# Who may call the model (the NetworkPolicy): Seldon's gateway runs in Istio's namespace by default
# (Ambassador's is usually `ambassador`); Prometheus, which scrapes the metrics port, in `monitoring`.
DEFAULT_INGRESS_NAMESPACE = "istio-system"
DEFAULT_MONITORING_NAMESPACE = "monitoring"
CANARY_PREDICTOR = "canary"
ADAPTER_RULES_FILE = "prometheus-adapter-rules.yaml"
RENDERING_FILE = "rendering.json"  # what was rendered, from what: also how a later run knows the folder is ours
MANAGED_BY = "app.kubernetes.io/managed-by"  # what Slipway applied carries it: undeploy and the canary find theirs by it
COMMON_LABELS = {"app.kubernetes.io/part-of": "slipway", MANAGED_BY: "slipway"}
SHARED_MEMORY_VOLUME = "dshm"
SHARED_MEMORY_PATH = "/dev/shm"
_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class RenderError(ValueError):
    """The manifests cannot be rendered as asked; the message says why and what to pass instead."""


@dataclass
class Rendered:
    """Manifests pinned to model versions, and how they were made (for the report)."""

    docs: list[dict[str, Any]]
    overlay: str
    namespace: str
    autoscaling: str
    engine: str
    models: dict[str, ModelVersion] = field(default_factory=dict)  # predictor -> version
    hpa_metric_source: str = "container"  # HPA CPU/memory on the model container, or on the whole pod
    shared_memory: str | None = None  # size of the memory-backed /dev/shm, where one is mounted
    warnings: list[str] = field(default_factory=list)  # what may not serve as meant (deployments.render.gpu.check_variant)
    split: str | None = None  # "cpu-gpu": the CPU stages in pods of their own (deployments.render.split)

    @property
    def name(self) -> str:
        return self.seldon_deployment["metadata"]["name"]

    @property
    def seldon_deployment(self) -> dict:
        return next(doc for doc in self.docs if doc["kind"] == seldon.KIND)

    @property
    def inference_path(self) -> str:
        return seldon.inference_path(self.namespace, self.name, self.name)

    @property
    def adapter_rules(self) -> dict | None:
        return autoscaling.adapter_rules() if autoscaling.needs_adapter_rules(self.docs) else None

    def summary(self) -> dict[str, Any]:
        return {
            "overlay": self.overlay,
            "namespace": self.namespace,
            "autoscaling": self.autoscaling,
            "hpa_metric_source": self.hpa_metric_source,
            "kustomize": self.engine,
            "inference_path": self.inference_path,
            "shared_memory": self.shared_memory,
            "split": self.split,
            "predictors": {p: {"version": m.version, "uri": m.uri, "digest": m.digest} for p, m in self.models.items()},
            "resources": [f"{doc['kind']}/{doc['metadata']['name']}" for doc in self.docs],
        }


def resolve_overlay(overlay: str | Path) -> Path:
    """A shipped overlay by name (cpu, gpu, canary), or the path of an SRE's own kustomization folder."""
    path = OVERLAYS_DIR / str(overlay) if str(overlay) in OVERLAYS else Path(overlay)
    if not (path / kustomize.KUSTOMIZATION_FILE).is_file():
        raise RenderError(f"overlay {overlay!r} is neither one of {', '.join(OVERLAYS)} nor a folder with a kustomization.yaml")
    return path


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    """Everything a rendering is pinned to besides its overlay, checked when made: each value's type strictly (no
    conversion but a list of strings to a tuple), then the namespaces, the HPA's metric source and the repository
    API's access, each refused with a RenderError saying what to pass instead.

    `autoscaling_mode`: the autoscaling component (deployments.render.autoscaling); `engine`: how kustomize builds;
    `hpa_metric_source`: "container" keeps the overlays' `ContainerResource` CPU/memory targets (pinned to each
    predictor's model container), "pod" turns them into pod-level `Resource` targets (clusters before 1.30);
    `dashboard`: also the Grafana dashboard's component; `split_mode`, `frontends_count`: deployments.render.split and
    deployments.render.frontends."""

    model: ModelVersion
    canary: ModelVersion | None = None
    canary_percent: int | None = None
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    namespace: str = DEFAULT_NAMESPACE
    ingress_namespace: str = DEFAULT_INGRESS_NAMESPACE
    monitoring_namespace: str = DEFAULT_MONITORING_NAMESPACE
    autoscaling_mode: str = "cpu"
    engine: kustomize.Engine = "auto"
    shared_memory: str | None = None
    hpa_metric_source: str = "container"
    gpu_node_selector: tuple[str, ...] = ()
    gpu_tolerations: tuple[str, ...] = ()
    node_selector: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()
    trt_cache_claim: str | None = None
    repository_api: str = "closed"
    repository_token_secret: str | None = None
    dashboard: bool = False
    split_mode: str | None = None
    frontends_count: int | None = None

    def __post_init__(self) -> None:
        for name in ("gpu_node_selector", "gpu_tolerations", "node_selector", "tolerations"):  # as argparse's `append` gives them
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("model", "canary"):  # an instance, never a dict a model could be made of
            if not isinstance(getattr(self, name), ModelVersion) and not (name == "canary" and self.canary is None):
                raise RenderError(
                    f"render option {name}: a ModelVersion (ModelVersion.from_record_file or from_artifact), "
                    f"not {type(getattr(self, name)).__name__}"
                )
        for name, adapter in _option_types().items():
            value = getattr(self, name)
            try:
                adapter.validate_python(value, strict=True)
            except ValidationError as err:
                raise RenderError(f"render option {name}: {err.errors()[0]['msg']}, not {value!r}") from None
        for namespace in (self.namespace, self.ingress_namespace, self.monitoring_namespace):
            check_namespace(namespace)
        if self.hpa_metric_source not in autoscaling.METRIC_SOURCES:
            raise RenderError(
                f"unknown HPA metric source {self.hpa_metric_source!r}; choose one of {', '.join(autoscaling.METRIC_SOURCES)}"
            )
        self.repository_env()

    def repository_env(self) -> list[dict[str, Any]]:
        """MLServer's model repository API (load, unload): closed, or open with a bearer token from a Secret."""
        try:
            return container_env(self.repository_api, self.repository_token_secret)
        except RepositoryApiError as err:
            raise RenderError(str(err)) from err


@functools.cache
def _option_types() -> dict[str, TypeAdapter[Any]]:
    hints = typing.get_type_hints(RenderOptions)
    return {
        option.name: TypeAdapter(hints[option.name])
        for option in dataclasses.fields(RenderOptions)
        if option.name not in ("model", "canary")
    }


def render(overlay: str | Path, options: RenderOptions) -> Rendered:
    """Build `overlay` (with the autoscaling component for `options.autoscaling_mode`, and with `options.dashboard`
    the Grafana dashboard's) and pin it to the versions and the rest of `options`."""
    model, canary = options.model, options.canary
    namespace, autoscaling_mode = options.namespace, options.autoscaling_mode
    repository_env = options.repository_env()
    directory = resolve_overlay(overlay)
    try:
        component = autoscaling.component_dir(autoscaling_mode)
    except ValueError as err:
        raise RenderError(str(err)) from err
    extra = [path for path in (component, DASHBOARD_COMPONENT if options.dashboard else None) if path]
    docs, used = kustomize.build(directory, extra_components=extra, engine=options.engine)
    sdeps = [doc for doc in docs if doc.get("kind") == seldon.KIND]
    if len(sdeps) != 1:
        raise RenderError(f"overlay {overlay} renders {len(sdeps)} SeldonDeployments; Slipway pins exactly one")
    try:
        autoscaling.check_gpu_mode(autoscaling_mode, len(list(gpu.gpu_pod_specs(sdeps[0]))))
    except ValueError as err:
        raise RenderError(str(err)) from err
    models = _assign_models(sdeps[0], model, canary)
    if options.canary_percent is not None:
        _split_traffic(sdeps[0], options.canary_percent)
    for doc in docs:
        _pin_common(doc, model.name, namespace)
        if is_dashboard(doc):
            try:
                pin_dashboard(doc, namespace=namespace, model=model.name)
            except DashboardError as err:
                raise RenderError(str(err)) from err
        if doc["kind"] == "NetworkPolicy":
            _fill(
                doc,
                {
                    "$(INGRESS_NAMESPACE)": options.ingress_namespace,
                    "$(MONITORING_NAMESPACE)": options.monitoring_namespace,
                },
            )
    _pin_seldon_deployment(sdeps[0], model, models, options.image, namespace, options.image_pull_policy)
    if options.shared_memory is not None:
        _mount_shared_memory(sdeps[0], options.shared_memory)
    pin_env(sdeps[0], repository_env)
    _pin_env_value(sdeps[0], NAMESPACE_ENV, namespace)  # the payload log's events say where they come from
    # GPU pods: the variant measured for GPUs, node placement (`KEY=VALUE`, `KEY[=VALUE][:EFFECT]`), TensorRT cache;
    # then every pod's placement
    try:
        warnings = gpu.place(
            sdeps[0],
            models,
            node_selector=options.gpu_node_selector,
            tolerations=options.gpu_tolerations,
            cache_claim=options.trt_cache_claim,
        )
        placement.place(sdeps[0], node_selector=options.node_selector, tolerations=options.tolerations)
    except gpu.PlacementError as err:
        raise RenderError(str(err)) from err
    if options.frontends_count is not None:  # N front ends and a session host per pod: $SLIPWAY_FRONTENDS, CPUs for them
        if options.split_mode is not None:
            raise RenderError("--frontends and --split are not rendered together yet: choose one")
        try:
            frontends.apply(sdeps[0], options.frontends_count)
        except frontends.FrontendsError as err:
            raise RenderError(str(err)) from err
    if options.split_mode is not None:  # after placement: the CPU components copy the model's pinned one, less its GPU
        _split(sdeps[0], options.split_mode, model, docs)
    for doc in docs:
        if doc["kind"] == "HorizontalPodAutoscaler":
            _pin_standalone_hpa(doc, sdeps[0])
    if options.hpa_metric_source == "pod":
        autoscaling.pod_level(docs)
    leftover = _placeholders(docs)
    if leftover:
        raise RenderError(f"placeholders left unset after rendering: {', '.join(sorted(leftover))}")
    return Rendered(
        docs=docs,
        overlay=str(overlay),
        namespace=namespace,
        autoscaling=autoscaling_mode,
        engine=used,
        models=models,
        shared_memory=options.shared_memory,
        hpa_metric_source=options.hpa_metric_source,
        warnings=warnings,
        split=options.split_mode,
    )


def _split(sdep: dict, mode: str, model: ModelVersion, docs: list[dict]) -> None:
    if mode not in split.SPLITS:
        raise RenderError(f"unknown split {mode!r}; choose one of {', '.join(split.SPLITS)}")
    if len(sdep["spec"]["predictors"]) != 1:
        raise RenderError("--split cpu-gpu splits one predictor; a canary's two are not split: use OVERLAY=cpu or gpu")
    try:
        if model.local_dir is not None:
            split.check_artifact(model.local_dir)
        split.split_predictor(sdep["spec"]["predictors"][0])
        for doc in docs:
            if doc["kind"] == "NetworkPolicy":
                split.open_executor_ports(doc)
    except split.SplitError as err:
        raise RenderError(str(err)) from err


def check_namespace(namespace: str) -> str:
    """The API server refuses every object in a namespace that is not a DNS-1123 label: refuse it before writing any."""
    if not isinstance(namespace, str) or not _DNS_1123_LABEL.match(namespace):
        suggestion = re.sub(r"[^a-z0-9-]+", "-", str(namespace).lower()).strip("-")[:63].strip("-") or DEFAULT_NAMESPACE
        raise RenderError(
            f"namespace {namespace!r} is not a DNS-1123 label: use at most 63 lower-case letters, digits "
            f"and '-', starting and ending with a letter or digit (e.g. {suggestion})"
        )
    return namespace


def namespace_argument(text: str) -> str:
    """`check_namespace` as an argparse type: a name Kubernetes refuses stops before any rendering or connecting."""
    import argparse

    try:
        return check_namespace(text)
    except RenderError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _assign_models(sdep: dict, model: ModelVersion, canary: ModelVersion | None) -> dict[str, ModelVersion]:
    names = [p["name"] for p in sdep["spec"]["predictors"]]
    if CANARY_PREDICTOR in names and canary is None:
        raise RenderError(
            "this overlay has a canary predictor: pass the canary's version record (--canary-record, "
            "or CANARY_VERSION=/CANARY_TAG= with make)"
        )
    if canary is not None and CANARY_PREDICTOR not in names:
        raise RenderError("a canary version was given, but this overlay has no canary predictor: use OVERLAY=canary")
    if canary is not None and canary.name != model.name:
        raise RenderError(
            f"the canary is model {canary.name!r} but the main version is {model.name!r}: "
            "a canary splits traffic between versions of one model"
        )
    return {name: canary if name == CANARY_PREDICTOR and canary is not None else model for name in names}


def _split_traffic(sdep: dict, canary_percent: int) -> None:
    predictors = sdep["spec"]["predictors"]
    if not 0 <= canary_percent <= 100:
        raise RenderError(f"canary percent must be between 0 and 100, got {canary_percent}")
    if len(predictors) != 2 or CANARY_PREDICTOR not in {p["name"] for p in predictors}:
        raise RenderError("a canary percentage needs an overlay with a main and a canary predictor (OVERLAY=canary)")
    for predictor in predictors:
        predictor["traffic"] = canary_percent if predictor["name"] == CANARY_PREDICTOR else 100 - canary_percent


def _pin_common(doc: dict, model_name: str, namespace: str) -> None:
    metadata = doc.setdefault("metadata", {})
    metadata["namespace"] = namespace
    metadata.setdefault("labels", {}).update({**COMMON_LABELS, "app.kubernetes.io/name": model_name, MODEL_LABEL: model_name})
    kind = doc["kind"]
    if kind == "ServiceAccount":
        metadata["name"] = service_account_name(model_name)
    elif kind == "PodMonitor":
        metadata["name"] = f"{model_name}-mlserver"
        doc["spec"]["selector"] = {"matchLabels": {MODEL_LABEL: model_name}}
    elif kind == "NetworkPolicy":
        metadata["name"] = f"{model_name}-ingress"
        doc["spec"]["podSelector"] = {"matchLabels": {MODEL_LABEL: model_name}}


def service_account_name(model_name: str) -> str:
    return f"slipway-{model_name}"


def _pin_seldon_deployment(
    sdep: dict,
    main: ModelVersion,
    models: dict[str, ModelVersion],
    image: str | None,
    namespace: str,
    image_pull_policy: str | None = None,
) -> None:
    """Name the deployment, graph nodes and containers after the model and point each predictor at its version."""
    sdep["metadata"]["name"] = main.name
    sdep["metadata"].setdefault("annotations", {}).update(
        {"slipway.io/model-version": main.version, "slipway.io/model-digest": main.digest}
    )
    for predictor in sdep["spec"]["predictors"]:
        pin_predictor(predictor, models[predictor["name"]], namespace=namespace, image=image, image_pull_policy=image_pull_policy)


def pin_predictor(
    predictor: dict, version: ModelVersion, *, namespace: str, image: str | None = None, image_pull_policy: str | None = None
) -> None:
    """Point one predictor (in place) at `version`: graph, labels, the version annotations its pods carry, the model
    container's name and digest, the spreading selector and the HPA's container. Also how the canary controller
    turns a copy of the live stable predictor into the canary, so that the two differ only in the version."""
    graph = predictor["graph"]
    old_name = graph["name"]
    graph.update(name=version.name, modelUri=version.uri)
    predictor.setdefault("labels", {}).update({MODEL_LABEL: version.name, PREDICTOR_LABEL: predictor["name"]})
    # On the predictor, so they reach its Deployment and pods: each pod says which version it serves.
    predictor.setdefault("annotations", {}).update(
        {"slipway.io/model-version": version.version, "slipway.io/model-digest": version.digest}
    )
    for _, _, component in seldon.pod_specs({"spec": {"predictors": [predictor]}}):
        spec = component.get("spec", {})
        if "serviceAccountName" in spec:
            spec["serviceAccountName"] = service_account_name(version.name)
        for constraint in spec.get("topologySpreadConstraints", []):
            constraint["labelSelector"] = {"matchLabels": {MODEL_LABEL: version.name, PREDICTOR_LABEL: predictor["name"]}}
        for container in spec.get("containers", []):
            if container["name"] == old_name:
                container["name"] = version.name
                if image:
                    container["image"] = image
                if image_pull_policy:
                    container["imagePullPolicy"] = image_pull_policy
                _pin_digest(container, version)
        _fill_keda_query(component, namespace=namespace, model=version.name, predictor=predictor["name"])
        # the HPA's ContainerResource metrics read the model container, renamed above
        autoscaling.pin_model_container(component.get("hpaSpec", {}).get("metricsv2", []), version.name, aliases=(old_name,))


def _pin_env_value(sdep: dict, name: str, value: str) -> None:
    """Set `name` to `value` in every predictor's model container (the one named like its graph)."""
    for predictor, _, component in seldon.pod_specs(sdep):
        for container in component.get("spec", {}).get("containers", []):
            if container.get("name") == predictor["graph"]["name"]:
                env = [item for item in container.get("env", []) if item.get("name") != name]
                container["env"] = [*env, {"name": name, "value": value}]


def _mount_shared_memory(sdep: dict, size: str) -> None:
    """A memory-backed emptyDir of `size` at /dev/shm in every container of every predictor's pod.

    For tensors in shared memory (the runtime's `shared_memory` setting): a producer container in
    the pod and MLServer then map the same tmpfs, sized for the regions instead of the runtime's
    64 MB default. Its pages count against the pod's memory limit.
    """
    mib = memory_mib(size)
    if mib is None or mib <= 0:
        raise RenderError(f"shared memory size {size!r} is not a Kubernetes quantity: give one such as 512Mi or 1Gi")
    for _, _, component in seldon.pod_specs(sdep):
        spec = component.setdefault("spec", {})
        volumes = [volume for volume in spec.get("volumes", []) if volume.get("name") != SHARED_MEMORY_VOLUME]
        spec["volumes"] = [*volumes, {"name": SHARED_MEMORY_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}]
        for container in spec.get("containers", []):
            mounts = [mount for mount in container.get("volumeMounts", []) if mount.get("mountPath") != SHARED_MEMORY_PATH]
            container["volumeMounts"] = [*mounts, {"name": SHARED_MEMORY_VOLUME, "mountPath": SHARED_MEMORY_PATH}]


def _pin_digest(container: dict, version: ModelVersion) -> None:
    """Make the runtime refuse any other content: the annotation informs people, this env var binds the server."""
    env = [item for item in container.setdefault("env", []) if item.get("name") != EXPECTED_DIGESTS_ENV]
    env.append({"name": EXPECTED_DIGESTS_ENV, "value": f"{version.name}={version.digest}"})
    container["env"] = env


def _fill_keda_query(component: dict, *, namespace: str, model: str, predictor: str) -> None:
    for trigger in component.get("kedaSpec", {}).get("triggers", []):
        metadata = trigger.get("metadata", {})
        for key, value in metadata.items():
            if isinstance(value, str):
                metadata[key] = (
                    value.replace("$(NAMESPACE)", namespace).replace("$(MODEL)", model).replace("$(PREDICTOR)", predictor)
                )


def _pin_standalone_hpa(hpa: dict, sdep: dict) -> None:
    """Point a standalone HPA at the Deployment Seldon creates for the predictor its label names."""
    predictor_name = hpa["metadata"].get("labels", {}).get(PREDICTOR_LABEL)
    predictor = next((p for p in sdep["spec"]["predictors"] if p["name"] == predictor_name), None)
    if predictor is None:
        raise RenderError(
            f"HorizontalPodAutoscaler {hpa['metadata']['name']} must carry the label {PREDICTOR_LABEL} "
            f"naming a predictor of {sdep['metadata']['name']}"
        )
    name = sdep["metadata"]["name"]
    hpa["metadata"]["name"] = f"{name}-{predictor_name}"
    hpa["metadata"]["labels"][PREDICTOR_LABEL] = predictor_name
    hpa["spec"]["scaleTargetRef"] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": seldon.deployment_name(name, predictor, 0),
    }
    autoscaling.pin_model_container(hpa["spec"].get("metrics", []), predictor["graph"]["name"])


def _fill(node: Any, values: dict[str, str]) -> Any:
    """Replace every string of `node` that is exactly a placeholder of `values`, in place."""
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in list(children):
        if isinstance(child, str) and child in values:
            node[key] = values[child]
        else:
            _fill(child, values)
    return node


def _placeholders(node: Any) -> set[str]:
    """Strings still holding a `$(NAME)` the renderer did not fill."""
    if isinstance(node, str):
        return {node} if "$(" in node else set()
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    return set().union(set(), *(_placeholders(child) for child in children))


def write_manifests(rendered: Rendered, out_dir: Path) -> list[Path]:
    """One YAML file per resource (`<kind>-<name>.yaml`), `all.yaml`, and the adapter rules where needed,
    swapped in atomically: the folder holds the old rendering or the new one, never a mix."""
    out_dir = Path(out_dir)
    names = []
    with atomic.staged_dir(out_dir, owns=lambda folder: (folder / RENDERING_FILE).is_file()) as staging:
        for doc in rendered.docs:
            name = f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
            (staging / name).write_text(yaml.safe_dump(doc, sort_keys=False))
            names.append(name)
        (staging / "all.yaml").write_text(yaml.safe_dump_all(rendered.docs, sort_keys=False))
        rules = rendered.adapter_rules
        if rules is not None:
            header = (
                "# prometheus-adapter Helm values: merge `rules.custom` into your adapter's values so the HPA\n"
                f"# can read {autoscaling.RPS_METRIC}. Not a Kubernetes resource: not in all.yaml.\n"
            )
            (staging / ADAPTER_RULES_FILE).write_text(header + yaml.safe_dump(rules, sort_keys=False))
            names.append(ADAPTER_RULES_FILE)
        (staging / RENDERING_FILE).write_text(json.dumps(rendered.summary(), indent=2, sort_keys=True) + "\n")
    return [out_dir / name for name in names]
