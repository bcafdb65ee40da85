"""What a GPU pod needs beyond the overlay: the variant measured for GPUs, its node placement, its TensorRT cache.

A pod is a GPU pod where its container asks for `nvidia.com/gpu` (the gpu overlay's, or an overlay of
one's own built on it). Placement: the overlay selects GPU Feature Discovery's label and tolerates the
`nvidia.com/gpu` taint; `--gpu-node-selector` and `--gpu-toleration` replace those for a cloud's labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from deployments.render import seldon
from deployments.render.placement import PlacementError, parse_node_selector, parse_toleration
from deployments.render.records import ModelVersion

GPU_RESOURCE = "nvidia.com/gpu"
TENSORRT_CACHE_VOLUME = "tensorrt-cache"
GPU_EXPORT = "python -m export variants --target gpu"  # how to make the variant a GPU serves
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")  # a claim's name


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
    selector = parse_node_selector(node_selector, "--gpu-node-selector") if node_selector else None
    parsed = [parse_toleration(text, "--gpu-toleration") for text in tolerations]
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
