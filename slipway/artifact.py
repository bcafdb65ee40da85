"""The model artifact folder: the contract between `export` (writes) and the runtime (reads).

Part of the shared core: `export`, `wrappers`, `loadtest` and `deployments` all read it, and it
needs only the core dependencies (pydantic, numpy), never MLServer, onnxruntime or TensorFlow.

A folder holds `model.onnx`, `model-settings.json` (naming `RUNTIME_IMPLEMENTATION` and a model
name `MODEL_NAME` admits), optional extras (an input example, labels, `variant.json`) and
`manifest.json` with the sha256 of every other file. The runtime refuses a
folder whose files do not match their manifest (a file changed, missing, or added), so
what serves is what was exported. A deployment can also pin the digest it expects
(`$SLIPWAY_EXPECTED_DIGESTS`), so a folder replaced together with its manifest is refused too.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from slipway import atomic
from slipway.files import FileProblem, read_json

MANIFEST_NAME = "manifest.json"
MODEL_FILE = "model.onnx"
SETTINGS_FILE = "model-settings.json"
INPUT_EXAMPLE_FILE = "input-example.npz"
VARIANT_FILE = "variant.json"  # written by `python -m export variants` / `import` beside model.onnx (slipway.precision)
# What model-settings.json names as `implementation` to be served by `wrappers.runtime.OnnxRuntime`.
RUNTIME_IMPLEMENTATION = "wrappers.runtime.OnnxRuntime"
# Model names: what a V2 URL path (/v2/models/<name>/infer) carries unescaped, as `export` names models.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
MANIFEST_FORMAT = "slipway.artifact/v1"
EXPECTED_DIGESTS_ENV = "SLIPWAY_EXPECTED_DIGESTS"
_CHUNK = 1 << 20
# Neither is content: the manifest describes the others, and the marker is `atomic.staged_dir`'s note
# that a folder is a previous output (a tuning trial's artifact carries one).
_NOT_CONTENT = {MANIFEST_NAME, atomic.OUTPUT_MARKER}


class ArtifactError(Exception):
    """The artifact folder is missing, incomplete or does not match its manifest."""


class FileEntry(BaseModel):
    sha256: str
    bytes: int


class Manifest(BaseModel):
    """What an artifact holds; `digest` names the whole folder's content."""

    format: str = MANIFEST_FORMAT
    digest: str
    files: dict[str, FileEntry] = Field(default_factory=dict)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in chunks so large models do not fill memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_digest(files: dict[str, FileEntry]) -> str:
    """One sha256 over the sorted (name, hash) pairs: equal content, equal digest."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name].sha256}\n".encode())
    return digest.hexdigest()


def build_manifest(folder: Path) -> Manifest:
    """Hash every file under `folder` (except the manifest itself)."""
    folder = Path(folder)
    files = {
        path.relative_to(folder).as_posix(): FileEntry(sha256=sha256_file(path), bytes=path.stat().st_size)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name not in _NOT_CONTENT
    }
    if MODEL_FILE not in files:
        raise ArtifactError(f"{folder} has no {MODEL_FILE}; an artifact folder needs one")
    return Manifest(digest=folder_digest(files), files=files)


def write_manifest(folder: Path) -> Manifest:
    """Hash the folder's files and write `manifest.json` atomically."""
    manifest = build_manifest(folder)
    atomic.write_json(Path(folder) / MANIFEST_NAME, manifest.model_dump())
    return manifest


def read_manifest(folder: Path) -> Manifest:
    """Parse `manifest.json`, with a clear error when it is absent or unreadable."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ArtifactError(f"{path} is missing: an artifact folder must carry its {MANIFEST_NAME}")
    try:
        return Manifest.model_validate(read_json(path))
    except ValidationError as err:
        from slipway.cli import one_line

        raise ArtifactError(f"{path} is not a valid manifest: {one_line(err, 'manifest')}") from err
    except FileProblem as err:
        raise ArtifactError(f"{err}: write the artifact again (`python -m export convert`)") from err


def is_artifact_folder(folder: Path) -> bool:
    """Does `folder` look like an artifact folder (it carries a manifest)? `staged_dir` may replace one."""
    return (Path(folder) / MANIFEST_NAME).is_file()


def verify_artifact(folder: Path, expected_digest: str | None = None) -> Manifest:
    """Check every file against the manifest; name the first file that is missing, changed or unlisted.

    With `expected_digest`, the manifest itself must be the pinned one (a deployment pins
    the digest the model store recorded at publish).
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    if expected_digest is not None and manifest.digest != expected_digest:
        raise ArtifactError(
            f"artifact {folder} is not the pinned version: its manifest digest is {manifest.digest[:12]}..., "
            f"the deployment expects {expected_digest[:12]}... (the folder was replaced)"
        )
    for name, entry in sorted(manifest.files.items()):
        path = folder / name
        if not path.is_file():
            raise ArtifactError(f"artifact {folder} is incomplete: {name} is listed in the manifest but missing")
        if path.stat().st_size != entry.bytes or sha256_file(path) != entry.sha256:
            raise ArtifactError(f"artifact {folder} was modified: {name} does not match its sha256 in {MANIFEST_NAME}")
    present = {
        path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file() and path.name not in _NOT_CONTENT
    }
    unlisted = sorted(present - set(manifest.files))
    if unlisted:
        raise ArtifactError(
            f"artifact {folder} was modified: {unlisted[0]} is not listed in its {MANIFEST_NAME}"
            + (f" (nor {len(unlisted) - 1} more)" if len(unlisted) > 1 else "")
        )
    if folder_digest(manifest.files) != manifest.digest:
        raise ArtifactError(f"{folder / MANIFEST_NAME} is inconsistent: its digest does not match its files")
    return manifest


def pinned_digest(model: str, version: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The digest a deployment pins for this model, from `$SLIPWAY_EXPECTED_DIGESTS`.

    The variable holds `NAME[:VERSION]=[sha256:]DIGEST` pairs separated by commas, e.g.
    `digits:3=sha256:ab12...`; a `NAME:VERSION` entry wins over a bare `NAME` one.
    """
    text = environ.get(EXPECTED_DIGESTS_ENV, "").strip()
    pins: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, digest = item.partition("=")
        digest = digest.strip().removeprefix("sha256:")
        if not sep or not key.strip() or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ArtifactError(
                f"{EXPECTED_DIGESTS_ENV} entry {item!r} is malformed: write NAME[:VERSION]=sha256:<64 hex digits>"
            )
        pins[key.strip()] = digest
    if version:
        return pins.get(f"{model}:{version}") or pins.get(model)
    return pins.get(model)


def load_input_example(folder: Path) -> tuple[dict[str, Any], dict[str, Any], object]:
    """The artifact's input example: (inputs by name, expected outputs by name, labels or None)."""
    import numpy as np

    path = Path(folder) / INPUT_EXAMPLE_FILE
    if not path.is_file():
        raise ArtifactError(f"{folder} has no {INPUT_EXAMPLE_FILE}; re-export it with `python -m export convert`")
    with np.load(path, allow_pickle=False) as archive:
        inputs = {key.split(":", 1)[1]: archive[key] for key in archive.files if key.startswith("input:")}
        outputs = {key.split(":", 1)[1]: archive[key] for key in archive.files if key.startswith("output:")}
        labels = archive["labels"] if "labels" in archive.files else None
    return inputs, outputs, labels
