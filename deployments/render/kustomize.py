"""Build a kustomization into plain resources: with `kubectl kustomize` where one is installed,
else with Slipway's own renderer for the subset of kustomize its overlays use.

The own renderer does resources, components, `patches` (strategic merge on custom resources,
JSON 6902 on anything), `labels`, `images` and `namespace`, in kustomize's order, and sorts its
output the way kustomize does. Anything else is refused by name rather than silently ignored;
the tests build every overlay both ways and compare.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import jsonpatch
import yaml

from slipway.files import FileProblem, parse_yaml, read_text

KUSTOMIZATION_FILE = "kustomization.yaml"
SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "components", "labels", "images", "namespace", "patches"}
SUPPORTED_LABEL_FIELDS = {"pairs"}
# Built-in kinds without a namespace; kustomize's `namespace` leaves them alone (custom kinds count as namespaced).
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "Node",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "RuntimeClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "IngressClass",
    "CertificateSigningRequest",
    "FlowSchema",
    "PriorityLevelConfiguration",
}
Engine = Literal["auto", "kubectl", "builtin"]
KUBECTL_TIMEOUT_S = 60

# kustomize's legacy output order: these kinds first (in this order), webhooks last, the rest between.
_ORDER_FIRST = (
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
)
_ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_KIND_RANK = {kind: index - len(_ORDER_FIRST) for index, kind in enumerate(_ORDER_FIRST)}
_KIND_RANK.update({kind: 1 + index for index, kind in enumerate(_ORDER_LAST)})


class KustomizeError(ValueError):
    """The kustomization uses something this renderer does not do, or points at nothing."""


# ---------------------------------------------------------------- entry points


def kubectl_binary() -> str | None:
    """The kubectl next to this interpreter (the venv's), else the first one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kubectl")


def build(directory: Path, *, extra_components: Sequence[Path] = (), engine: Engine = "auto") -> tuple[list[dict], str]:
    """The resources `directory` produces, with `extra_components` applied on top; returns (docs, engine used).

    Extra components go through a throwaway kustomization that lists `directory` as its only
    resource, so both engines see the same thing.
    """
    directory = Path(directory).resolve()
    if not (directory / KUSTOMIZATION_FILE).is_file():
        raise KustomizeError(f"{directory} has no {KUSTOMIZATION_FILE}")
    if engine == "auto":
        engine = "kubectl" if kubectl_binary() else "builtin"
    with _wrapped(directory, [Path(c).resolve() for c in extra_components]) as target:
        docs = build_with_kubectl(target) if engine == "kubectl" else build_builtin(target)
    return docs, engine


def build_with_kubectl(directory: Path) -> list[dict]:
    """`kubectl kustomize directory`, parsed."""
    kubectl = kubectl_binary()
    if kubectl is None:
        raise KustomizeError("kubectl is not installed; use the builtin renderer (--kustomize builtin)")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S)
    if result.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def build_builtin(directory: Path) -> list[dict]:
    """Slipway's own renderer: the same output as kustomize for the features listed above."""
    return sorted(_build_level(Path(directory).resolve(), expect_component=False, accumulated=[]), key=_legacy_order)


# ---------------------------------------------------------------- the builtin renderer


def _read_yaml(source: Path | str, what: str = "") -> list[Any]:
    """Every document of a YAML file (a path) or of inline text, or a one-line `KustomizeError` saying where it breaks."""
    try:
        if isinstance(source, Path):
            source, what = read_text(source), str(source)
        return copy.deepcopy(_parsed_documents(source, what))
    except FileProblem as err:
        raise KustomizeError(str(err)) from err


@functools.lru_cache(maxsize=256)
def _parsed_documents(text: str, what: str) -> list[Any]:
    """The documents in `text`, parsed once per text and name: every render reads the same base and components again,
    and PyYAML takes 10-25 ms a file; `_read_yaml` hands out copies, which the renderer then changes."""
    return parse_yaml(text, what, documents=True)


def _build_level(directory: Path, *, expect_component: bool, accumulated: list[dict]) -> list[dict]:
    """One kustomization (or component) applied in kustomize's order: resources, components, transformers."""
    path = directory / KUSTOMIZATION_FILE
    if not path.is_file():
        raise KustomizeError(f"{directory} has no {KUSTOMIZATION_FILE}")
    found = _read_yaml(path)
    spec = (found[0] if found else None) or {}
    if len(found) > 1 or not isinstance(spec, dict):
        raise KustomizeError(f"{path}: a kustomization is one YAML mapping (resources:, components:, patches: ...)")
    unknown = sorted(set(spec) - SUPPORTED_FIELDS)
    if unknown:
        raise KustomizeError(f"{path}: fields {unknown} are not supported by Slipway's renderer; install kubectl")
    is_component = spec.get("kind") == "Component"
    if is_component != expect_component:
        raise KustomizeError(
            f"{path}: a {'Component' if is_component else 'Kustomization'} is listed as a "
            f"{'component' if expect_component else 'resource'}"
        )
    resources = accumulated if is_component else []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            resources.extend(_build_level(target, expect_component=False, accumulated=[]))
        elif target.is_file():
            resources.extend(doc for doc in _read_yaml(target) if doc)
        else:
            raise KustomizeError(f"{path}: resource {entry!r} does not exist")
    for entry in spec.get("components", []):
        target = (directory / entry).resolve()
        if not target.is_dir():
            raise KustomizeError(f"{path}: component {entry!r} is not a folder")
        _build_level(target, expect_component=True, accumulated=resources)
    for patch in spec.get("patches", []):
        _apply_patch(resources, directory, patch)
    if "namespace" in spec:
        for doc in resources:
            if doc.get("kind") not in CLUSTER_SCOPED_KINDS:
                doc.setdefault("metadata", {})["namespace"] = spec["namespace"]
    for label_set in spec.get("labels", []):
        extra = sorted(set(label_set) - SUPPORTED_LABEL_FIELDS)
        if extra:
            raise KustomizeError(f"{path}: labels options {extra} are not supported by Slipway's renderer")
        for doc in resources:
            doc.setdefault("metadata", {}).setdefault("labels", {}).update(label_set.get("pairs", {}))
    for image in spec.get("images", []):
        for doc in resources:
            set_image(doc, image)
    return resources


def _apply_patch(resources: list[dict], directory: Path, patch: dict) -> None:
    if "path" in patch:
        source = directory / str(patch["path"])
        if not source.is_file():
            raise KustomizeError(f"{directory}: patch file {patch['path']!r} does not exist")
        found = _read_yaml(source)
    elif "patch" in patch:
        found = _read_yaml(str(patch["patch"]), f"{directory}: the inline patch")
    else:
        raise KustomizeError(f"{directory}: a patch needs `path` or `patch`")
    body = found[0] if len(found) == 1 else None
    if not isinstance(body, (dict, list)):
        raise KustomizeError(f"{directory}: a patch is one YAML mapping (strategic merge) or list (JSON 6902)")
    if isinstance(body, list):  # JSON 6902
        if "target" not in patch:
            raise KustomizeError(f"{directory}: a JSON 6902 patch needs a `target`")
        matched = _select(resources, patch["target"], directory)
        for doc in matched:
            try:
                patched = jsonpatch.apply_patch(doc, body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                raise KustomizeError(f"{directory}: patch on {_label(doc)} failed: {err}") from err
            doc.clear()
            doc.update(patched)
        return
    target = patch.get("target") or {"kind": body.get("kind"), "name": body.get("metadata", {}).get("name")}
    for doc in _select(resources, target, directory):
        if _is_builtin_kind(doc) and _has_list(body.get("spec")):
            raise KustomizeError(
                f"{directory}: a strategic-merge patch with lists on the built-in kind {doc['kind']} merges by "
                "Kubernetes' own merge keys, which Slipway's renderer does not model; use a JSON 6902 patch or kubectl"
            )
        merged = merge_patch(doc, {key: value for key, value in body.items() if key not in ("apiVersion", "kind")})
        merged["metadata"]["name"] = doc["metadata"]["name"]  # a patch targets a resource; it never renames it
        doc.clear()
        doc.update(merged)


def _select(resources: list[dict], target: dict, directory: Path) -> list[dict]:
    allowed = {"group", "version", "kind", "name", "namespace"}
    unknown = sorted(set(target) - allowed)
    if unknown:
        raise KustomizeError(f"{directory}: patch target fields {unknown} are not supported by Slipway's renderer")
    matched = [doc for doc in resources if _matches(doc, target)]
    if not matched:
        raise KustomizeError(f"{directory}: patch target {target} matches no resource")
    return matched


def _matches(doc: dict, target: dict) -> bool:
    group, _, version = doc.get("apiVersion", "").rpartition("/")
    fields = {
        "group": group,
        "version": version,
        "kind": doc.get("kind"),
        "name": doc.get("metadata", {}).get("name"),
        "namespace": doc.get("metadata", {}).get("namespace"),
    }
    return all(value is None or fields[key] == value for key, value in target.items())


def merge_patch(base: Any, patch: Any) -> Any:
    """Strategic merge as kustomize does it for custom resources: maps merge, lists are replaced, `null` deletes."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for key, value in patch.items():
            if isinstance(key, str) and key.startswith("$"):
                raise KustomizeError(f"patch directive {key!r} is not supported by Slipway's renderer")
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = merge_patch(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def _is_builtin_kind(doc: dict) -> bool:
    group = doc.get("apiVersion", "").rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def _has_list(value: Any) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, dict) and any(_has_list(item) for item in value.values())


def _legacy_order(doc: dict) -> tuple:
    group, _, version = doc.get("apiVersion", "").rpartition("/")
    kind = doc.get("kind", "")
    gvk = "_".join((group or "~G", version or "~V", kind or "~K"))
    metadata = doc.get("metadata", {})
    return (_KIND_RANK.get(kind, 0), gvk, metadata.get("namespace") or "", metadata.get("name") or "")


def _label(doc: dict) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


# ---------------------------------------------------------------- images


def set_image(doc: dict, image: dict) -> None:
    """kustomize's `images` transformer: rewrite every container image whose name matches."""
    for container in iter_containers(doc):
        name, tag, _ = split_image(container.get("image", ""))
        if name != image["name"]:
            continue
        new_name = image.get("newName", name)
        if "digest" in image:
            container["image"] = f"{new_name}@{image['digest']}"
        else:
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


def iter_containers(node: Any) -> Iterator[dict]:
    """Every container (and init container) anywhere in a resource, as kustomize's image transformer finds them."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (item for item in value if isinstance(item, dict))
            else:
                yield from iter_containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from iter_containers(item)


# ---------------------------------------------------------------- extra components


@contextlib.contextmanager
def _wrapped(directory: Path, components: list[Path]) -> Iterator[Path]:
    """`directory` itself, or a throwaway kustomization adding `components` to it (relative paths:
    kustomize refuses absolute ones)."""
    if not components:
        yield directory
        return
    tmp = Path(tempfile.mkdtemp(prefix="slipway-kustomize-"))
    try:
        spec = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(directory, tmp)],
            "components": [os.path.relpath(component, tmp) for component in components],
        }
        (tmp / KUSTOMIZATION_FILE).write_text(yaml.safe_dump(spec, sort_keys=False))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
