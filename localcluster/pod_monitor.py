"""A PodMonitor as Prometheus scrape jobs, the way prometheus-operator writes them, for a Prometheus run by hand.

No prometheus-operator runs on the local cluster: the PodMonitor render ships (deployments/base/podmonitor.yaml) is
only stored by the API server. `scrape_jobs` turns it into what the operator would generate from it: per
`podMetricsEndpoints` entry one job discovering the pods of the monitor's namespaces through the API server (role
`pod`, the cluster's kubeconfig), keeping those whose labels match `selector.matchLabels` and the container port
named `port`, and labelling each series with `namespace`, `pod`, `container` and each of `podTargetLabels` (their
names sanitized as Prometheus does: `slipway.io/model` -> `slipway_io_model`). Pods that finished (Succeeded, Failed)
are dropped, as the operator drops them. Only what Slipway's PodMonitor uses is translated; anything else is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_SUPPORTED_SPEC = {"selector", "podTargetLabels", "podMetricsEndpoints", "namespaceSelector"}
_SUPPORTED_ENDPOINT = {"port", "path", "interval"}


class UnsupportedPodMonitor(ValueError):
    """The PodMonitor uses a field this translation does not carry over."""


def sanitized(label: str) -> str:
    """A Kubernetes label name as a Prometheus label name (what discovery's meta labels and the operator use)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def scrape_jobs(pod_monitor: dict[str, Any], kubeconfig: Path, *, interval: str | None = None) -> list[dict[str, Any]]:
    """The scrape jobs for `pod_monitor` (a dict as the API server returns it); `interval` overrides each endpoint's."""
    metadata, spec = pod_monitor["metadata"], pod_monitor["spec"]
    unknown = sorted(set(spec) - _SUPPORTED_SPEC) + sorted(
        {key for endpoint in spec["podMetricsEndpoints"] for key in endpoint} - _SUPPORTED_ENDPOINT
    )
    if unknown or set(spec["selector"]) - {"matchLabels"}:
        raise UnsupportedPodMonitor(
            f"PodMonitor {metadata['name']} uses {', '.join(unknown) or 'selector.matchExpressions'}: "
            "only selector.matchLabels, podTargetLabels, namespaceSelector.matchNames and each endpoint's port, path "
            "and interval are translated"
        )
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [metadata["namespace"]]
    selecting = [
        {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_pod_label_{sanitized(key)}",
                f"__meta_kubernetes_pod_labelpresent_{sanitized(key)}",
            ],
            "regex": f"({re.escape(value)});true",
        }
        for key, value in sorted(spec["selector"].get("matchLabels", {}).items())
    ]
    labelling = [
        {"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)"},
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ] + [
        {"source_labels": [f"__meta_kubernetes_pod_label_{sanitized(label)}"], "target_label": sanitized(label), "regex": "(.+)"}
        for label in spec.get("podTargetLabels", [])
    ]
    jobs = []
    for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
        port = [{"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": endpoint["port"]}]
        job: dict[str, Any] = {
            "job_name": f"podMonitor/{metadata['namespace']}/{metadata['name']}/{index}",
            "kubernetes_sd_configs": [{"role": "pod", "kubeconfig_file": str(kubeconfig), "namespaces": {"names": namespaces}}],
            "metrics_path": endpoint.get("path", "/metrics"),
            "relabel_configs": selecting + port + labelling,
        }
        if interval or endpoint.get("interval"):
            job["scrape_interval"] = interval or endpoint["interval"]
        jobs.append(job)
    return jobs
