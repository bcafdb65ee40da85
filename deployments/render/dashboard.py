"""The Grafana dashboard component (components/dashboard): pinning its ConfigMap to one model.

The dashboard's panels read the `namespace` and `model` dashboard variables, so the JSON itself is the same for
every model; what render fills is what Grafana needs told apart per model: the ConfigMap's name, the dashboard's
uid and title (two dashboards with one uid replace each other in Grafana) and the variables' defaults, so that it
opens on the model it was rendered for.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deployments.render.autoscaling import COMPONENTS_DIR

COMPONENT_DIR = COMPONENTS_DIR / "dashboard"
SIDECAR_LABEL = "grafana_dashboard"  # what Grafana's dashboard sidecar looks for by default (value "1")
_UID_LIMIT = 40  # Grafana refuses longer dashboard uids


class DashboardError(ValueError):
    """The dashboard ConfigMap cannot be pinned; the message says what is wrong in it."""


def is_dashboard(doc: dict[str, Any]) -> bool:
    return doc.get("kind") == "ConfigMap" and SIDECAR_LABEL in doc.get("metadata", {}).get("labels", {})


def configmap_name(model: str) -> str:
    return f"{model}-dashboard"


def uid(namespace: str, model: str) -> str:
    """Readable where it fits Grafana's 40 characters, else a digest of the two names (still one per model)."""
    readable = f"slipway-{namespace}-{model}"
    if len(readable) <= _UID_LIMIT:
        return readable
    return f"slipway-{hashlib.sha256(f'{namespace}/{model}'.encode()).hexdigest()[:24]}"


def pin(doc: dict[str, Any], *, namespace: str, model: str) -> None:
    """Name the ConfigMap after the model and fill every placeholder of each dashboard JSON it holds, in place."""
    doc["metadata"]["name"] = configmap_name(model)
    values = {
        "$(DASHBOARD_UID)": uid(namespace, model),
        "$(DASHBOARD_TITLE)": f"Slipway / {model} ({namespace})",
        "$(NAMESPACE)": namespace,
        "$(MODEL)": model,
    }
    for key, text in doc.get("data", {}).items():
        try:
            dashboard = json.loads(text)
        except (TypeError, ValueError) as err:
            raise DashboardError(
                f"ConfigMap {doc['metadata']['name']} key {key} is not a dashboard's JSON ({err}): paste the JSON Grafana exports"
            ) from err
        doc["data"][key] = json.dumps(_filled(dashboard, values), indent=2) + "\n"


def _filled(node: Any, values: dict[str, str]) -> Any:
    """`node` with every string that is exactly a placeholder of `values` replaced."""
    if isinstance(node, dict):
        return {key: _filled(child, values) for key, child in node.items()}
    if isinstance(node, list):
        return [_filled(child, values) for child in node]
    return values.get(node, node) if isinstance(node, str) else node
