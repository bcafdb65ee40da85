"""Load-time checks of the model's folder: its manifest and pinned digest, and the key of TensorRT's caches.

A folder that does not match its manifest, or not the digest a deployment pins, is refused before a
session is built; TensorRT's engine caches are keyed by the content served (the verified manifest's
digest, else the graph file's sha256), so a changed model never meets an engine built for another.
Each problem is an `ArtifactError` or `SettingsError` whose message says what to do; the runtime names
the model.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from engine.tensorrt import with_tensorrt_cache
from slipway.artifact import MANIFEST_NAME, ArtifactError, pinned_digest, read_manifest, sha256_file, verify_artifact
from slipway.runtime_settings import TENSORRT_CACHE_ENV, RuntimeSettings


def verify_folder(folder: Path, model: str, version: str | None, verify_manifest: bool) -> None:
    """Refuse a folder that does not match its manifest, or not the digest a deployment pins."""
    pinned = pinned_digest(model, version)
    if not (verify_manifest or pinned):
        return
    if not (folder / MANIFEST_NAME).is_file():
        raise ArtifactError(
            f"{folder} has no {MANIFEST_NAME}; publish it with `python -m export` "
            "or set parameters.extra.verify_manifest=false to serve an unverified model"
        )
    try:
        verify_artifact(folder, expected_digest=pinned)
    except ArtifactError as err:
        raise ArtifactError(f"refusing to load: {err}") from err


def with_content_keyed_cache(config: RuntimeSettings, model: str, model_path: Path) -> RuntimeSettings:
    """The settings with TensorRT's caches where the pod says (`$SLIPWAY_TENSORRT_CACHE_DIR`), keyed by the
    content: the verified manifest's digest, else the graph file's sha256."""
    if not os.environ.get(TENSORRT_CACHE_ENV, "").strip():
        return config
    folder = model_path.parent
    digest = None
    if config.verify_manifest and (folder / MANIFEST_NAME).is_file():
        with contextlib.suppress(ArtifactError):
            digest = read_manifest(folder).digest  # verified just before
    return with_tensorrt_cache(config, model=model, digest=digest or sha256_file(model_path))
