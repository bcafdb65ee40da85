"""Build a kustomization into plain resources, for machines without `kubectl kustomize`.

Only the kustomize features Slipway's own base and overlays use are implemented
(resources, labels, images, namespace, strategic-merge patches); anything else is
refused by name rather than silently ignored.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "labels", "images", "namespace", "patches"}
KUSTOMIZATION_FILE = "kustomization.yaml"


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not do, or points at nothing."""


def build(directory: Path) -> list[dict[str, Any]]:
    """The resources a kustomization directory produces, in order."""
    directory = Path(directory)
    path = directory / KUSTOMIZATION_FILE
    if not path.is_file():
        raise KustomizeError(f"{directory} has no {KUSTOMIZATION_FILE}")
    spec = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(spec) - SUPPORTED_FIELDS)
    if unknown:
        raise KustomizeError(f"{path}: fields {unknown} are not supported by Slipway's renderer; use kubectl kustomize")
    resources: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            resources.extend(build(target))
        elif target.is_file():
            resources.extend(doc for doc in yaml.safe_load_all(target.read_text()) if doc)
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    for patch in spec.get("patches", []):
        _apply_patch(resources, directory, patch)
    for label_set in spec.get("labels", []):
        for doc in resources:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(label_set.get("pairs", {}))
    for image in spec.get("images", []):
        for doc in resources:
            set_image(doc, image)
    if "namespace" in spec:
        for doc in resources:
            doc.setdefault("metadata", {})["namespace"] = spec["namespace"]
    return resources


def _apply_patch(resources: list[dict], directory: Path, patch: dict) -> None:
    if "path" in patch:
        body = yaml.safe_load((directory / patch["path"]).read_text())
    elif "patch" in patch:
        body = yaml.safe_load(patch["patch"])
    else:
        raise KustomizeError(f"{directory}: a patch needs `path` or `patch`")
    target = patch.get("target") or {"kind": body.get("kind"), "name": body.get("metadata", {}).get("name")}
    matched = [doc for doc in resources if _matches(doc, target)]
    if not matched:
        raise KustomizeError(f"{directory}: patch target {target} matches no resource")
    for doc in matched:
        name = doc.get("metadata", {}).get("name")
        merged = strategic_merge(doc, body)
        merged["metadata"]["name"] = name  # a patch targets a resource; it never renames it
        doc.clear()
        doc.update(merged)


def _matches(doc: dict, target: dict) -> bool:
    return all(
        value is None or (doc.get("kind") if key == "kind" else doc.get("metadata", {}).get(key)) == value
        for key, value in target.items()
    )


def strategic_merge(base: Any, patch: Any) -> Any:
    """Merge `patch` into `base`: maps merge, lists of named items merge by name, `null` deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        merged = copy.deepcopy(base)
        index = {item["name"]: position for position, item in enumerate(merged)}
        for item in patch:
            if item["name"] in index:
                merged[index[item["name"]]] = strategic_merge(merged[index[item["name"]]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(patch)


def _named(items: list) -> bool:
    return all(isinstance(item, dict) and "name" in item for item in items)


def set_image(doc: dict, image: dict) -> None:
    """kustomize's `images` transformer: rewrite every container image whose name matches."""
    for container in iter_containers(doc):
        name, _, _ = split_image(container.get("image", ""))
        if name != image["name"]:
            continue
        new_name = image.get("newName", name)
        if "digest" in image:
            container["image"] = f"{new_name}@{image['digest']}"
        else:
            _, tag, _ = split_image(container["image"])
            new_tag = image.get("newTag", tag)
            container["image"] = f"{new_name}:{new_tag}" if new_tag else new_name


def split_image(reference: str) -> tuple[str, str | None, str | None]:
    """`registry/name:tag@digest` -> (name, tag, digest); a port in the registry is not a tag."""
    name, _, digest = reference.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest or None
    return name, None, digest or None


def iter_containers(doc: dict):
    """Every container spec in a SeldonDeployment or a core workload."""
    spec = doc.get("spec", {})
    for predictor in spec.get("predictors", []):
        for component in predictor.get("componentSpecs", []):
            yield from component.get("spec", {}).get("containers", [])
    yield from spec.get("template", {}).get("spec", {}).get("containers", [])
