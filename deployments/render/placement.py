"""Where a rendering's pods run: `--node-selector KEY=VALUE` and `--toleration KEY[=VALUE][:EFFECT]` (repeatable) on
every pod, whatever the overlay, checked as Kubernetes checks labels and taints.

The selector's labels are added to the overlay's own (an option's value wins for the same key) and the tolerations
to its list; the gpu overlay's GPU placement (deployments/render/gpu.py, `--gpu-node-selector`, `--gpu-toleration`,
which replace the overlay's) is applied first, so a GPU pod gets both. KServe's rendering takes the pod settings
from here too. The local cluster's real node (`slipway.dev/node=real`, tainted NoSchedule) is one use:
`--node-selector slipway.dev/node=real --toleration slipway.dev/node=real:NoSchedule`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from deployments.render import seldon

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PlacementError(ValueError):
    """A placement option Kubernetes would refuse, or one that has nothing to apply to; the message says what to pass."""


def place(sdep: dict, *, node_selector: Sequence[str] = (), tolerations: Sequence[str] = ()) -> None:
    """Every pod of `sdep` (in place) on the nodes `node_selector` selects, tolerating `tolerations`."""
    selector = parse_node_selector(node_selector)
    parsed = [parse_toleration(text) for text in tolerations]
    for _, _, component in seldon.pod_specs(sdep):
        spec = component.setdefault("spec", {})
        if selector:
            spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **selector}
        for toleration in parsed:
            if toleration not in spec.setdefault("tolerations", []):
                spec["tolerations"].append(dict(toleration))


def parse_node_selector(items: Sequence[str], option: str = "--node-selector") -> dict[str, str]:
    """`KEY=VALUE` pairs as a nodeSelector, each key and value checked as Kubernetes checks labels."""
    selector: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise PlacementError(f"{option} {item!r} is not KEY=VALUE (e.g. cloud.google.com/gke-accelerator=nvidia-l4)")
        _check_key(key, f"{option} {item!r}")
        _check_value(value, f"{option} {item!r}")
        if key in selector:
            raise PlacementError(f"{option} names {key!r} twice: a node has one value per label")
        selector[key] = value
    return selector


def parse_toleration(text: str, option: str = "--toleration") -> dict[str, str]:
    """`KEY[=VALUE][:EFFECT]`, as `kubectl taint` writes taints: with a value it tolerates that value only
    (operator Equal), without one every value (Exists); without an effect, every effect."""
    rest, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, equals, value = rest.partition("=")
    where = f"{option} {text!r}"
    _check_key(key, where)
    toleration = {"key": key, "operator": "Equal" if equals else "Exists"}
    if equals:
        _check_value(value, where)
        toleration["value"] = value
    if colon:
        if effect not in TAINT_EFFECTS:
            raise PlacementError(f"{where}: effect {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        toleration["effect"] = effect
    return toleration


def _check_key(key: str, where: str) -> None:
    """A label or taint key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise PlacementError(
            f"{where}: key prefix {prefix!r} is not a DNS subdomain (lower-case letters, digits, "
            "'-' and '.', e.g. cloud.google.com)"
        )
    if not _NAME.match(name):
        raise PlacementError(
            f"{where}: key name {name!r} must be 1-63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit"
        )


def _check_value(value: str, where: str) -> None:
    if value and not _NAME.match(value):
        raise PlacementError(
            f"{where}: value {value!r} must be at most 63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit"
        )
