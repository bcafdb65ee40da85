"""Prove a deployed model's HPA on the local cluster: simulated CPU usage up, replicas up; usage down, replicas down.

kwok reports each pod's CPU usage from a ResourceUsage object of the pod's name (which wins over the
cluster's baseline), per container: metrics-server scrapes it as it would a kubelet (the containers'
`container_cpu_usage_seconds_total` and `container_memory_working_set_bytes`), and the real HPA controller
acts on it under the HPA's own `behavior`, reading the model container alone for a `ContainerResource`
metric or the pod's sum for a `Resource` one. Replicas, usage and the HPA's view are sampled over time into
one record per engine, named after the kind that owns the HPA's target Deployment (Seldon's operator or KServe's
controller made it): `reports/cluster-hpa.json` for Seldon Core, `reports/cluster-hpa-kserve.json` for KServe, each
with a PNG beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deployments.kserve import api as kserve
from deployments.render import seldon
from slipway.reports import write_report

REPORT = "cluster-hpa"
SAMPLE_EVERY_S = 2.0
# The kind that owns a deployed model's Deployment -> its engine, and how a figure names it.
ENGINES = {seldon.KIND: "seldon", kserve.ISVC_KIND: "kserve"}
ENGINE_TITLES = {"seldon": "Seldon Core", "kserve": "KServe"}


@dataclass(frozen=True)
class Sample:
    seconds: float
    phase: str  # "high" or "low": the simulated usage per pod
    replicas: int  # the Deployment's spec.replicas, as the HPA set it
    ready: int
    utilization: int | None  # the HPA's current average CPU utilization, percent of the request (container's or pod's)


class ProofFailed(RuntimeError):
    """The HPA scales no deployed model's Deployment, or did not scale as its behaviour says within the time given."""


def report_name(engine: str) -> str:
    """Each engine's own record: Seldon's keeps the name it had before KServe, `cluster-hpa-<engine>` for the others."""
    return REPORT if engine == "seldon" else f"{REPORT}-{engine}"


def engine_of(deployment) -> str | None:
    """The engine whose resource controls `deployment` (its owner's kind), None for a Deployment neither made."""
    owners = deployment.metadata.owner_references or []
    return next((ENGINES[owner.kind] for owner in owners if owner.controller and owner.kind in ENGINES), None)


def _set_usage(api, namespace: str, selector: str, container: str, cpu: str) -> None:
    """A ResourceUsage of `cpu` for every pod `selector` matches (pods the HPA adds get theirs at the next sample)."""
    from kubernetes import client

    from localcluster.objects import apply

    pods = [
        meta.name
        for pod in client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
        if (meta := pod.metadata) is not None and meta.deletion_timestamp is None
    ]
    for pod in pods:
        apply(
            api,
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ResourceUsage",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"usages": [{"containers": [container], "usage": {"cpu": {"value": cpu}, "memory": {"value": "300Mi"}}}]},
            },
        )


def sample(api, namespace: str, hpa, began: float, phase: str) -> Sample:
    """The HPA's target Deployment (replicas, Ready) and the HPA's CPU utilization now, `began` the phases' clock."""
    from kubernetes import client

    deployment = client.AppsV1Api(api).read_namespaced_deployment(hpa.spec.scale_target_ref.name, namespace)
    utilization = next(
        (
            source.current.average_utilization
            for metric in (hpa.status.current_metrics or [])
            if (source := _resource_status(metric)) and source.name == "cpu"
        ),
        None,
    )
    return Sample(
        round(time.monotonic() - began, 1),
        phase,
        deployment.spec.replicas or 0,
        (deployment.status.ready_replicas if deployment.status else None) or 0,
        utilization,
    )


def _resource_status(metric):
    """The status of a `ContainerResource` or `Resource` metric (name, current), else None."""
    return {"ContainerResource": metric.container_resource, "Resource": metric.resource}.get(metric.type)


def _model_container(hpa, target) -> str:
    """The container whose usage rises: the one the HPA's CPU metric reads, else the pod's first."""
    named = [
        metric.container_resource.container
        for metric in hpa.spec.metrics or []
        if metric.type == "ContainerResource" and metric.container_resource.name == "cpu"
    ]
    return named[0] if named else target.spec.template.spec.containers[0].name


def prove(
    api,
    *,
    namespace: str,
    hpa_name: str,
    container: str | None = None,
    high: str = "900m",
    low: str = "50m",
    timeout_s: float = 240.0,
    on_sample: Callable[[Sample], None] = lambda _: None,
) -> dict[str, Any]:
    """Drive usage to `high` until the HPA reaches its maximum, then to `low` until it is back at its minimum.
    The usage is the `container`'s (default: the one the HPA's CPU metric names)."""
    from kubernetes import client

    from deployments.rollout.kube_api import dynamic_client

    autoscaling = client.AutoscalingV2Api(api)
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(hpa_name, namespace)
    target = client.AppsV1Api(api).read_namespaced_deployment(hpa.spec.scale_target_ref.name, namespace)
    selector = ",".join(f"{key}={value}" for key, value in (target.spec.selector.match_labels or {}).items())
    engine = engine_of(target)
    if engine is None:
        raise ProofFailed(
            f"the HPA {namespace}/{hpa_name} scales Deployment {hpa.spec.scale_target_ref.name}, which neither a {seldon.KIND} "
            f"nor an {kserve.ISVC_KIND} owns: name the HPA of a model `make deploy` made (--hpa)"
        )
    container = container or _model_container(hpa, target)
    began = time.monotonic()
    samples: list[Sample] = []
    phases: dict[str, float] = {}
    try:
        for phase, cpu in (("high", high), ("low", low)):
            phases[phase] = round(time.monotonic() - began, 1)
            goal = hpa.spec.max_replicas if phase == "high" else hpa.spec.min_replicas
            deadline = time.monotonic() + timeout_s
            while True:
                _set_usage(api, namespace, selector, container, cpu)
                hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(hpa_name, namespace)
                now = sample(api, namespace, hpa, began, phase)
                samples.append(now)
                on_sample(now)
                if now.replicas == goal and now.ready == goal:
                    break
                if time.monotonic() > deadline:
                    raise ProofFailed(
                        f"with every pod at {cpu} CPU the HPA {namespace}/{hpa_name} did not reach {goal} "
                        f"replicas within {timeout_s:.0f}s (at {now.replicas}, utilization "
                        f"{now.utilization}%)"
                    )
                time.sleep(SAMPLE_EVERY_S)
    finally:
        usages = dynamic_client(api).resources.get(api_version="kwok.x-k8s.io/v1alpha1", kind="ResourceUsage")
        for usage in usages.get(namespace=namespace).items:
            usages.delete(name=usage.metadata.name, namespace=namespace)
    behavior = hpa.spec.behavior.to_dict() if hpa.spec.behavior else None
    return {
        "engine": engine,
        "namespace": namespace,
        "hpa": hpa_name,
        "container": container,
        "usage_per_pod": {"high": high, "low": low},
        "metrics": [metric.to_dict() for metric in hpa.spec.metrics or []],
        "min_replicas": hpa.spec.min_replicas,
        "max_replicas": hpa.spec.max_replicas,
        "behavior": behavior,
        "phase_started_s": phases,
        "samples": [asdict(each) for each in samples],
    }


def write(result: dict[str, Any], reports_dir: Path | None = None) -> Path:
    """The engine's JSON report, and a PNG of replicas and utilization over time beside it; returns the JSON's path."""
    path = write_report(report_name(result["engine"]), result, reports_dir)
    plot(
        result,
        path.with_suffix(".png"),
        title=f"HPA {result['namespace']}/{result['hpa']} ({ENGINE_TITLES[result['engine']]}), local cluster: kwok usage, "
        "metrics-server",
        phase_labels={phase: f"usage {usage}/pod" for phase, usage in result["usage_per_pod"].items()},
    )
    return path


def plot(result: dict[str, Any], path: Path, *, title: str, phase_labels: dict[str, str]) -> None:
    """Replicas, Ready pods and the HPA's CPU utilization over `result`'s samples, each phase's start marked, as a PNG."""
    from slipway.plots import pyplot, save_png

    samples = result["samples"]
    plt = pyplot()
    figure, replicas_axis = plt.subplots(figsize=(8, 4))
    seconds = [sample["seconds"] for sample in samples]
    replicas_axis.step(seconds, [sample["replicas"] for sample in samples], where="post", label="replicas (HPA)")
    replicas_axis.step(seconds, [sample["ready"] for sample in samples], where="post", linestyle="--", label="Ready pods")
    replicas_axis.set_xlabel("seconds")
    replicas_axis.set_ylabel("replicas")
    replicas_axis.set_ylim(0, result["max_replicas"] + 1)
    utilization_axis = replicas_axis.twinx()
    utilization_axis.plot(
        seconds, [sample["utilization"] for sample in samples], color="tab:red", alpha=0.6, label="CPU utilization (% of request)"
    )
    utilization_axis.set_ylabel("CPU utilization, %")
    for phase, started in result["phase_started_s"].items():
        replicas_axis.axvline(started, color="grey", linewidth=0.8)
        replicas_axis.annotate(phase_labels[phase], (started, result["max_replicas"] + 0.5), fontsize=8, color="grey")
    lines = replicas_axis.get_legend_handles_labels()
    more = utilization_axis.get_legend_handles_labels()
    replicas_axis.legend(lines[0] + more[0], lines[1] + more[1], loc="lower right", fontsize=8)
    replicas_axis.set_title(title)
    save_png(figure, path)
