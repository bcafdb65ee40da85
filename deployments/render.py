"""Render the manifests for one model version: the base (or an overlay) with the model filled in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deployments import kustomize
from slipway import atomic

DEPLOYMENTS_DIR = Path(__file__).resolve().parent
BASE_DIR = DEPLOYMENTS_DIR / "base"
SELDON_KIND = "SeldonDeployment"
DEFAULT_IMAGE = "slipway/mlserver-onnx:0.1.0"
DEFAULT_URI_TEMPLATE = "s3://slipway-models/{name}/{version}"


class RenderError(ValueError):
    """The manifests cannot be rendered for this model; the message says why."""


@dataclass(frozen=True)
class ModelRef:
    """The one model version a rendering is pinned to."""

    name: str
    version: str
    uri: str
    digest: str

    @classmethod
    def from_artifact(cls, model_dir: Path, *, version: str | None = None, uri: str | None = None) -> ModelRef:
        """Read the name and digest from an artifact folder; the version defaults to the digest's first 12 hex."""
        from wrappers.artifact import SETTINGS_FILE, ArtifactError, read_manifest

        settings_path = Path(model_dir) / SETTINGS_FILE
        if not settings_path.is_file():
            raise RenderError(f"{model_dir} is not an artifact folder (no {SETTINGS_FILE}); run `make demo` first")
        settings = json.loads(settings_path.read_text())
        try:
            digest = read_manifest(model_dir).digest
        except ArtifactError as err:
            raise RenderError(str(err)) from err
        name = settings["name"]
        version = version or settings.get("parameters", {}).get("version") or digest[:12]
        return cls(name=name, version=str(version), uri=uri or DEFAULT_URI_TEMPLATE.format(name=name, version=version), digest=digest)


def render(model: ModelRef, *, image: str = DEFAULT_IMAGE, source: Path = BASE_DIR) -> list[dict[str, Any]]:
    """Build the kustomization at `source` and pin every SeldonDeployment to `model` and `image`."""
    docs = kustomize.build(source)
    image_name, tag, digest = kustomize.split_image(image)
    override = {"name": "slipway/mlserver-onnx", "newName": image_name}
    if digest:
        override["digest"] = digest
    elif tag:
        override["newTag"] = tag
    seldon = [doc for doc in docs if doc.get("kind") == SELDON_KIND]
    if not seldon:
        raise RenderError(f"{source} renders no {SELDON_KIND}")
    for doc in docs:
        kustomize.set_image(doc, override)
    for doc in seldon:
        _pin(doc, model)
    return docs


def _pin(doc: dict, model: ModelRef) -> None:
    """Name the deployment, graph node and container after the model and point at its version."""
    metadata = doc.setdefault("metadata", {})
    metadata["name"] = model.name
    metadata.setdefault("labels", {}).update({"app.kubernetes.io/name": model.name, "slipway.io/model": model.name})
    metadata.setdefault("annotations", {}).update(
        {"slipway.io/model-version": model.version, "slipway.io/model-digest": f"sha256:{model.digest}"}
    )
    for predictor in doc["spec"]["predictors"]:
        graph = predictor["graph"]
        old_name = graph["name"]
        graph["name"] = model.name
        graph["modelUri"] = model.uri
        for component in predictor.get("componentSpecs", []):
            for container in component.get("spec", {}).get("containers", []):
                if container["name"] == old_name:
                    container["name"] = model.name


def write_manifests(docs: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One YAML file per resource (`<kind>-<name>.yaml`) plus `all.yaml`, swapped in atomically."""
    out_dir = Path(out_dir)
    names = []
    with atomic.staged_dir(out_dir) as staging:
        for doc in docs:
            name = f"{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
            (staging / name).write_text(yaml.safe_dump(doc, sort_keys=False))
            names.append(name)
        (staging / "all.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return [out_dir / name for name in names]
