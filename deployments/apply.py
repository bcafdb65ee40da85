"""Apply rendered manifests to the current kubectl context with server-side apply.

Reachability is checked before anything is sent, so "no cluster" is one clear line and
nothing is half-applied.
"""

from __future__ import annotations

from typing import Any

FIELD_MANAGER = "slipway"


class ClusterUnavailable(RuntimeError):
    """No kubeconfig, or the cluster it names does not answer."""


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
        raise ClusterUnavailable(f"the cluster at {host} does not answer ({type(err).__name__})") from err
    return api


def apply(docs: list[dict[str, Any]], *, namespace: str, dry_run: str | None = None) -> list[str]:
    """Server-side apply every resource; returns `kind/name` of each applied resource."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(connect())
    applied = []
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs = {"body": doc, "field_manager": FIELD_MANAGER, "force_conflicts": True}
        if resource.namespaced:
            kwargs["namespace"] = doc.get("metadata", {}).get("namespace", namespace)
        if dry_run:
            kwargs["dry_run"] = "All"
        resource.server_side_apply(**kwargs)
        applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return applied
