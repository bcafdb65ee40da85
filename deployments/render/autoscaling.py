"""Request-rate autoscaling: MLServer's own request counter, and the prometheus-adapter rule
that turns it into the per-pod metric an HPA reads.

The names live here once: the rps component's HPA metric, the KEDA query and the adapter
rule must agree, and a test checks them against the counter a real MLServer exposes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal, overload

from deployments.render import seldon
from slipway.files import read_json
from slipway.seldon_patch import MODEL_CONTAINER

# prometheus_client appends `_total` to a Counter's name when it exposes it.
REQUEST_COUNTER = "model_infer_request_success_total"
RPS_METRIC = "mlserver_infer_requests_per_second"
RATE_WINDOW = "1m"
COMPONENTS_DIR = Path(__file__).resolve().parent.parent / "components"  # deployments/components
MODES = ("cpu", "rps", "keda", "behavior")  # cpu: the base's hpaSpec, no component
# KEDA on what a GPU pod saturates on: the runtime's queue time (p90 over 1m), or the cards' DCGM utilization.
# Only for renderings with GPU pods (`check_gpu_mode`); kept apart from MODES, which every overlay renders.
GPU_MODES = ("gpu-queue", "gpu-util")
ALL_MODES = MODES + GPU_MODES
# What the GPU modes' queries read: the runtime's histogram (wrappers.operations.metrics.QUEUE_SECONDS) and DCGM's gauge.
QUEUE_HISTOGRAM = "slipway_queue_seconds"
GPU_UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
# Where an HPA reads CPU and memory: the model container alone (`ContainerResource`, GA in Kubernetes 1.30), or the
# sum over every container of the pod (`Resource`: a sidecar's usage, Istio's, counts too) for older clusters.
METRIC_SOURCES = ("container", "pod")


@overload
def component_dir(mode: Literal["rps", "keda", "behavior", "gpu-queue", "gpu-util"]) -> Path: ...
@overload
def component_dir(mode: str) -> Path | None: ...
def component_dir(mode: str) -> Path | None:
    """The kustomize component that switches predictor 0 to `mode` (None for the default, CPU)."""
    if mode not in ALL_MODES:
        raise ValueError(f"unknown autoscaling mode {mode!r}; choose one of {', '.join(ALL_MODES)}")
    return None if mode == "cpu" else COMPONENTS_DIR / f"autoscaling-{mode}"


def check_gpu_mode(mode: str, gpu_pods: int) -> None:
    """Refuse a GPU mode on a rendering without GPU pods: a CPU pod has no GPU queue to read nor a card to measure."""
    if mode in GPU_MODES and not gpu_pods:
        raise ValueError(
            f"--autoscaling {mode} scales GPU pods, and no container of this rendering asks for nvidia.com/gpu: "
            "render the gpu overlay (--overlay gpu, make OVERLAY=gpu) or choose one of "
            f"{', '.join(MODES)}"
        )


def adapter_rules() -> dict:
    """prometheus-adapter Helm values (`rules.custom`) serving RPS_METRIC per pod to the custom metrics API."""
    return {
        "rules": {
            "custom": [
                {
                    "seriesQuery": f'{REQUEST_COUNTER}{{namespace!="",pod!=""}}',
                    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                    "name": {"matches": f"^{REQUEST_COUNTER}$", "as": RPS_METRIC},
                    "metricsQuery": f"sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{RATE_WINDOW}])) by (<<.GroupBy>>)",
                }
            ]
        }
    }


def _hpa_metrics(docs: list[dict]) -> Iterator[tuple[str | None, list[dict]]]:
    """(predictor, metrics) for every HPA in `docs`: each hpaSpec, and each standalone HPA (its predictor
    from its label)."""
    for doc in docs:
        if doc.get("kind") == seldon.KIND:
            for predictor, _, component in seldon.pod_specs(doc):
                yield predictor.get("name"), component.get("hpaSpec", {}).get("metricsv2", [])
        elif doc.get("kind") == "HorizontalPodAutoscaler":
            yield doc.get("metadata", {}).get("labels", {}).get(seldon.PREDICTOR_LABEL), doc.get("spec", {}).get("metrics", [])


def pods_metric_names(docs: list[dict]) -> Iterator[str]:
    """Names of every `Pods` metric an autoscaler in `docs` reads (hpaSpec or a standalone HPA)."""
    for _, metrics in _hpa_metrics(docs):
        for metric in metrics:
            if metric.get("type") == "Pods":
                yield metric["pods"]["metric"]["name"]


def needs_adapter_rules(docs: list[dict]) -> bool:
    return RPS_METRIC in set(pods_metric_names(docs))


def resource_name(metric: dict) -> str | None:
    """The resource (cpu, memory) a `Resource` or `ContainerResource` metric reads; None for other metrics."""
    source = {"Resource": "resource", "ContainerResource": "containerResource"}.get(str(metric.get("type")))
    return (metric.get(source) or {}).get("name") if source else None


def pin_model_container(metrics: list[dict], container: str, *, aliases: tuple[str, ...] = ()) -> None:
    """Point every `ContainerResource` metric naming MODEL_CONTAINER (or one of `aliases`, the container's name
    before rendering renamed it) at `container`, in place."""
    for metric in metrics:
        source = metric.get("containerResource") if metric.get("type") == "ContainerResource" else None
        if source and source.get("container") in (MODEL_CONTAINER, *aliases):
            source["container"] = container


def pod_level(docs: list[dict]) -> None:
    """Turn every autoscaler's `ContainerResource` metrics into `Resource` ones (the pod's sum over its containers),
    in place: for clusters where ContainerResource is not available (before Kubernetes 1.30, see METRIC_SOURCES)."""
    for _, metrics in _hpa_metrics(docs):
        for index, metric in enumerate(metrics):
            if metric.get("type") == "ContainerResource":
                source = {key: value for key, value in metric.get("containerResource", {}).items() if key != "container"}
                metrics[index] = {"type": "Resource", "resource": source}


def scales_on_cpu(docs: list[dict], predictor: str) -> bool:
    """Whether `predictor`'s autoscaler reads CPU utilization (of the pod or of a container): its hpaSpec, a KEDA
    cpu trigger, or a standalone HPA."""
    if any(owner == predictor and resource_name(metric) == "cpu" for owner, metrics in _hpa_metrics(docs) for metric in metrics):
        return True
    return any(
        owner.get("name") == predictor and trigger.get("type") == "cpu"
        for doc in docs
        if doc.get("kind") == seldon.KIND
        for owner, _, component in seldon.pod_specs(doc)
        for trigger in component.get("kedaSpec", {}).get("triggers", [])
    )


def busy_cpu_warning(docs: list[dict], predictor: str, model_dir: Path | None) -> str | None:
    """A warning when `predictor` autoscales on CPU utilization while its model's settings keep a CPU busy
    between requests (the pod would read as loaded at low traffic and scale out); None otherwise, or where
    the model's settings are not on this machine."""
    from slipway.artifact import SETTINGS_FILE
    from slipway.runtime_settings import busy_waiting_settings

    if model_dir is None or not scales_on_cpu(docs, predictor):
        return None
    busy = busy_waiting_settings(read_json(Path(model_dir) / SETTINGS_FILE))
    if not busy:
        return None
    return (
        f"predictor {predictor} autoscales on CPU utilization, but its model keeps a CPU busy between requests "
        f"({'; '.join(busy)}): it would read as loaded at low traffic and scale out. Render with --autoscaling "
        "rps (or keda), or turn those settings off"
    )
