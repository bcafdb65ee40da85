"""Record what KEDA does to a deployed model on the local cluster: the Deployment's replicas and the HPA KEDA made.

Sampled every couple of seconds until a condition holds: the Deployment's `spec.replicas` (what the HPA set), its
Ready replicas, and each external metric the HPA read (KEDA's trigger values: a cron trigger's desired replicas, a
Prometheus query's answer). Each scenario lands in a section of `reports/keda-scaling.json`, with the changes of
replicas listed one by one (when, from, to, and what the metrics read then), and a PNG beside it, one panel per
scenario.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slipway.reports import read_report, write_report

REPORT = "keda-scaling"
SAMPLE_EVERY_S = 2.0
HPA_PREFIX = "keda-hpa-"  # KEDA names the HPA it makes for a ScaledObject keda-hpa-<name>


@dataclass(frozen=True)
class Sample:
    seconds: float  # since the watch began
    at: float  # UTC epoch seconds
    phase: str  # what the scenario was doing then (the load it drove, the cron window it was in)
    replicas: int  # the Deployment's spec.replicas, as the HPA set it
    ready: int
    metrics: dict[str, float | None] = field(default_factory=dict)  # the HPA's current value of each external metric


class NotScaled(RuntimeError):
    """The replicas did not reach what the scenario waits for within the time given."""


def _quantity(value: Any) -> float | None:
    from kubernetes.utils import parse_quantity

    return None if value is None else float(parse_quantity(value))


def hpa_metrics(api, namespace: str, scaled_object: str) -> dict[str, float | None]:
    """Each external metric of the HPA KEDA made for `scaled_object`, as the HPA read it last (None before it has)."""
    from kubernetes import client

    try:
        hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(HPA_PREFIX + scaled_object, namespace)
    except client.ApiException as err:
        if err.status == 404:
            return {}
        raise
    values: dict[str, float | None] = {metric.external.metric.name: None for metric in hpa.spec.metrics or [] if metric.external}
    for current in (hpa.status.current_metrics if hpa.status else None) or []:
        if current.external:
            reading = current.external.current
            values[current.external.metric.name] = _quantity(reading.average_value or reading.value)
    return values


def watch(
    api,
    *,
    namespace: str,
    deployment: str,
    scaled_object: str,
    until: Callable[[list[Sample]], bool],
    phase: Callable[[], str],
    timeout_s: float,
    samples: list[Sample],
    began: float,
    on_sample: Callable[[Sample], None] = lambda sample: None,
) -> list[Sample]:
    """Sample into `samples` (times from `began`, a time.monotonic()) until `until(samples)` holds; NotScaled when
    `timeout_s` passes first."""
    from kubernetes import client

    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        status = apps.read_namespaced_deployment(deployment, namespace)
        sample = Sample(
            seconds=round(time.monotonic() - began, 1),
            at=round(time.time(), 1),
            phase=phase(),
            replicas=int((status.spec.replicas if status.spec else None) or 0),
            ready=int((status.status.ready_replicas if status.status else None) or 0),
            metrics=hpa_metrics(api, namespace, scaled_object),
        )
        samples.append(sample)
        on_sample(sample)
        if until(samples):
            return samples
        if time.monotonic() > deadline:
            raise NotScaled(
                f"{namespace}/{deployment} at {sample.replicas} replicas after {timeout_s:.0f}s "
                f"({sample.phase}; the HPA read {sample.metrics or 'nothing yet'})"
            )
        time.sleep(SAMPLE_EVERY_S)


def changes(samples: list[Sample]) -> list[dict[str, Any]]:
    """Every change of the replicas: when (seconds and UTC), from, to, in which phase, what the metrics read then."""
    return [
        {
            "seconds": after.seconds,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(after.at)),
            "from": before.replicas,
            "to": after.replicas,
            "phase": after.phase,
            "metrics": after.metrics,
        }
        for before, after in zip(samples, samples[1:])
        if after.replicas != before.replicas
    ]


def record(name: str, section: dict[str, Any], samples: list[Sample], reports_dir: Path | None = None) -> Path:
    """Add (or replace) scenario `name` in the report, with its samples and changes; redraw the PNG. The JSON's path."""
    report = read_report(REPORT, reports_dir) or {}
    scenarios = {
        **report.get("scenarios", {}),
        name: {**section, "scaled": changes(samples), "samples": [asdict(s) for s in samples]},
    }
    path = write_report(REPORT, {"scenarios": scenarios}, reports_dir)
    _plot(scenarios, path.with_suffix(".png"))
    return path


def _plot(scenarios: dict[str, dict[str, Any]], path: Path) -> None:
    from slipway.plots import pyplot, save_png

    plt = pyplot()
    figure, axes = plt.subplots(len(scenarios), 1, figsize=(8, 3.2 * len(scenarios)), squeeze=False)
    for axis, (name, scenario) in zip(axes[:, 0], sorted(scenarios.items())):
        samples = scenario["samples"]
        seconds = [sample["seconds"] for sample in samples]
        axis.step(seconds, [sample["replicas"] for sample in samples], where="post", label="replicas (KEDA's HPA)")
        axis.step(seconds, [sample["ready"] for sample in samples], where="post", linestyle="--", label="Ready pods")
        axis.set_ylabel("replicas")
        axis.set_title(f"{name}: {scenario.get('description', '')}", fontsize=9)
        metric_axis = axis.twinx()
        for metric in sorted({key for sample in samples for key in sample["metrics"]}):
            metric_axis.plot(
                seconds, [sample["metrics"].get(metric) for sample in samples], alpha=0.5, linewidth=1, label=metric[:40]
            )
        metric_axis.set_ylabel("as the HPA read it (AverageValue: per replica)", fontsize=8)
        for before, after in zip(samples, samples[1:]):
            if after["phase"] != before["phase"]:
                axis.axvline(after["seconds"], color="grey", linewidth=0.8)
                axis.annotate(
                    after["phase"],
                    (after["seconds"], 0.03),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    color="grey",
                    va="bottom",
                    rotation=90,
                )
        lines, labels = axis.get_legend_handles_labels()
        more_lines, more_labels = metric_axis.get_legend_handles_labels()
        axis.legend(lines + more_lines, labels + more_labels, fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("seconds")
    save_png(figure, path)
