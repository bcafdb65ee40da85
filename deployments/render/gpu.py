"""What a GPU pod needs beyond the overlay: the variant measured for GPUs, its node placement, its TensorRT cache.

A pod is a GPU pod where its container asks for `nvidia.com/gpu` (the gpu overlay's, or an overlay of
one's own built on it). Placement: the overlay selects GPU Feature Discovery's label and tolerates the
`nvidia.com/gpu` taint; `--gpu-node-selector` and `--gpu-toleration` replace those for a cloud's labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from deployments.render import seldon
from deployments.render.records import ModelVersion

GPU_RESOURCE = "nvidia.com/gpu"
TENSORRT_CACHE_VOLUME = "tensorrt-cache"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GPU_EXPORT = "python -m export variants --target gpu"  # how to make the variant a GPU serves
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PlacementError(ValueError):
    """A GPU option Kubernetes would refuse, or one that has nothing to apply to; the message says what to pass."""


def gpu_pod_specs(sdep: dict) -> Iterator[tuple[str, dict]]:
    """(predictor name, pod spec) of every component whose containers ask for GPUs."""
    for predictor, _, component in seldon.pod_specs(sdep):
        spec = component.get("spec", {})
        if any(
            GPU_RESOURCE in {**(c.get("resources") or {}).get("limits", {}), **(c.get("resources") or {}).get("requests", {})}
            for c in spec.get("containers", [])
        ):
            yield predictor["name"], spec


def check_variant(predictor: str, version: ModelVersion) -> str | None:
    """Refuse the CPU's U8S8 int8 on a GPU pod; a warning (or None) for anything else not known to be fp32/fp16/S8S8.

    Where nothing on this machine says what the version computes in (a record in object storage published without
    `lineage.numerics`), warn rather than refuse: refusing would block every such record, fp16 ones included.
    """
    from slipway.precision import Numerics, NumericsError, read_numerics

    where = f"{version.name} v{version.version} (predictor {predictor})"
    try:
        numerics = read_numerics(version.local_dir) if version.local_dir else None
    except NumericsError as err:
        raise PlacementError(f"{where}: {err}") from err
    found = version.lineage.get("numerics") if isinstance(version.lineage, dict) else None
    if numerics is None and isinstance(found, dict) and found.get("precision"):
        numerics = Numerics(found["precision"], found.get("int8_format"), found.get("variant"), "the record's lineage")
    if numerics is None:
        return (
            f"{where}: nothing says whether it is fp32, fp16 or int8, and a GPU must not serve the CPU's U8S8 "
            f"int8; render from its artifact folder (--model-dir) to have it checked"
        )
    if numerics.for_gpu is False:
        raise PlacementError(
            f"{where} is the CPU's int8 ({numerics.int8_format}: uint8 activations, from {numerics.source}), which "
            f"GPUs run slower than fp32 or not at all: deploy a GPU variant on the gpu overlay (`{GPU_EXPORT}`, or "
            "`python -m export import MODEL.onnx --target gpu`, makes int8 as S8S8 and chooses among fp32, fp16 and "
            "int8 by GPU timing; publish its choice), or use the cpu overlay"
        )
    if numerics.for_gpu is None:
        return (
            f"{where} is int8 of unknown flavour ({numerics.source}): if it is the CPU's U8S8, GPUs run it "
            f"slower than fp32; `{GPU_EXPORT}` makes S8S8"
        )
    return None


def parse_node_selector(items: Sequence[str]) -> dict[str, str]:
    """`KEY=VALUE` pairs as a nodeSelector, each key and value checked as Kubernetes checks labels."""
    selector: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise PlacementError(
                f"--gpu-node-selector {item!r} is not KEY=VALUE (e.g. cloud.google.com/gke-accelerator=nvidia-l4)"
            )
        _check_key(key, f"--gpu-node-selector {item!r}")
        _check_value(value, f"--gpu-node-selector {item!r}")
        if key in selector:
            raise PlacementError(f"--gpu-node-selector names {key!r} twice: a node has one value per label")
        selector[key] = value
    return selector


def parse_toleration(text: str) -> dict[str, str]:
    """`KEY[=VALUE][:EFFECT]`, as `kubectl taint` writes taints: with a value it tolerates that value only
    (operator Equal), without one every value (Exists); without an effect, every effect."""
    rest, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, equals, value = rest.partition("=")
    where = f"--gpu-toleration {text!r}"
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


def check_claim(name: str) -> str:
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise PlacementError(
            f"--trt-cache-claim {name!r} is not a PersistentVolumeClaim name (a DNS subdomain: "
            "lower-case letters, digits, '-' and '.')"
        )
    return name


def place(
    sdep: dict,
    models: dict[str, ModelVersion],
    *,
    node_selector: Sequence[str] = (),
    tolerations: Sequence[str] = (),
    cache_claim: str | None = None,
) -> list[str]:
    """Check each GPU pod's version, set its placement and TensorRT cache volume; returns the warnings.

    Placement options on a rendering without GPU pods are refused: pinning CPU pods to GPU nodes wastes GPUs,
    and ignoring the options would hide that the overlay is not the one meant.
    """
    selector = parse_node_selector(node_selector) if node_selector else None
    parsed = [parse_toleration(text) for text in tolerations]
    claim = check_claim(cache_claim) if cache_claim is not None else None
    pods = list(gpu_pod_specs(sdep))
    if not pods:
        given = [
            option
            for option, value in (
                ("--gpu-node-selector", node_selector),
                ("--gpu-toleration", tolerations),
                ("--trt-cache-claim", cache_claim),
            )
            if value
        ]
        if given:
            raise PlacementError(
                f"{' and '.join(given)} place GPU pods, and no container of this rendering asks for "
                f"{GPU_RESOURCE}: render the gpu overlay (--overlay gpu, make OVERLAY=gpu)"
            )
        return []
    warnings = []
    for predictor, spec in pods:
        if warning := check_variant(predictor, models[predictor]):
            warnings.append(warning)
        if selector is not None:
            spec["nodeSelector"] = dict(selector)
        if parsed:
            spec["tolerations"] = [dict(toleration) for toleration in parsed]
        if claim is not None:
            volume = next((v for v in spec.get("volumes", []) if v.get("name") == TENSORRT_CACHE_VOLUME), None)
            if volume is None:
                raise PlacementError(
                    f"--trt-cache-claim: predictor {predictor}'s pod has no {TENSORRT_CACHE_VOLUME!r} "
                    "volume to put on the claim (the gpu overlay mounts one)"
                )
            volume.clear()
            volume.update(name=TENSORRT_CACHE_VOLUME, persistentVolumeClaim={"claimName": claim})
    return warnings
