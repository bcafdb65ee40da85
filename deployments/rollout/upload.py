"""Put a version's artifact folder at its `modelUri`, and prove what is there is that version.

The folder goes up file by file with `manifest.json` last, so a folder with a manifest is
whole; then every file is read back and hashed against the manifest, and the manifest's
digest must be the version's. A version is immutable: a destination that already holds
other bytes under the same URI is refused, never overwritten. `pvc://claim/path` is written
through the claim mounted on this machine (`--pvc-mount`), as the pods will see it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from deployments.render.records import ModelVersion
from deployments.rollout.storage_secret import fsspec_options
from slipway.artifact import MANIFEST_NAME, ArtifactError, Manifest, folder_digest, read_manifest

ProgressHook = Callable[[int], None]


class UploadError(RuntimeError):
    """The bytes are not (or cannot be made) what the version says; the message says what to do."""


@dataclass(frozen=True)
class Placed:
    """Where a version now is, and whether this run wrote it or found it there already."""

    uri: str
    digest: str
    bytes: int
    uploaded: bool


class Destination:
    """The folder a `modelUri` names, opened with the storage Secret's settings (or a mounted claim)."""

    def __init__(self, uri: str, settings: Mapping[str, str], *, endpoint: str | None = None, pvc_mount: Path | None = None):
        from export.store.blobs import ArtifactRoot
        from export.store.db import StoreError

        scheme, _, rest = uri.partition("://")
        parent, _, self.leaf = rest.rstrip("/").rpartition("/")
        if not parent or not self.leaf:
            raise UploadError(f"modelUri {uri!r} names no folder inside a bucket: use {scheme}://BUCKET/PATH/VERSION")
        if scheme == "pvc":
            if pvc_mount is None:
                raise UploadError(
                    f"{uri} is a PersistentVolumeClaim the pods mount: mount the claim on this machine "
                    f"and pass --pvc-mount DIR (make deploy PVC_MOUNT=DIR), or copy the folder into it "
                    f"yourself and deploy again"
                )
            claim, _, inside = parent.partition("/")
            url = str(Path(pvc_mount) / inside) if inside else str(pvc_mount)
            options: dict = {}
        else:
            url, options = f"{scheme}://{parent}", fsspec_options(scheme, settings, endpoint=endpoint)
        try:
            self.root = ArtifactRoot(url, **options)
        except StoreError as err:
            raise UploadError(f"cannot open {uri}: {err}") from err
        self.uri = uri
        self.bucket = None if scheme == "pvc" else parent.partition("/")[0]

    def check_bucket(self) -> None:
        """Refuse a missing bucket rather than let the driver create one where a typo put it."""
        if self.bucket is not None and not self.root.fs.exists(self.bucket):
            raise UploadError(
                f"bucket {self.bucket!r} of {self.uri} does not exist, or the storage Secret's credentials "
                f"cannot see it: create it (e.g. aws s3 mb s3://{self.bucket}) or deploy with another "
                f"MODEL_URI=/STORAGE_ROOT=; nothing was uploaded or applied"
            )

    def manifest(self) -> Manifest | None:
        """The stored manifest, None where the folder holds none (nothing uploaded, or an upload cut short)."""
        try:
            return self.root.read_manifest(self.leaf)
        except FileNotFoundError:
            return None

    def verify(self, digest: str, on_bytes: ProgressHook = lambda n: None) -> Manifest:
        """Read every stored file back; each must hash as the manifest says, and the manifest name `digest`."""
        expected = digest.removeprefix("sha256:")
        manifest = self.manifest()
        if manifest is None:
            raise UploadError(
                f"{self.uri} holds no {MANIFEST_NAME}: the version was never uploaded there (or only in "
                f"part); deploy it from its artifact folder or store to upload it"
            )
        if manifest.digest != expected or folder_digest(manifest.files) != manifest.digest:
            raise UploadError(
                f"{self.uri} holds version digest {manifest.digest[:12]}..., not {expected[:12]}...: "
                f"a version is immutable, so deploy this one under a new URI (another version number)"
            )
        stored = self.root.file_names(self.leaf) - {MANIFEST_NAME}
        if stored != set(manifest.files):
            extra, missing = sorted(stored - set(manifest.files)), sorted(set(manifest.files) - stored)
            raise UploadError(
                f"{self.uri} does not hold exactly the version's files (extra: {extra or 'none'}; "
                f"missing: {missing or 'none'}): remove the folder and deploy again"
            )
        for name, entry in sorted(manifest.files.items()):
            if self.root.file_sha256(self.leaf, name) != entry.sha256:
                raise UploadError(
                    f"{self.uri}/{name} is not the file the manifest lists (its sha256 differs): remove "
                    f"the folder and deploy again to upload it whole"
                )
            on_bytes(entry.bytes)
        return manifest


def place(version: ModelVersion, destination: Destination, *, on_bytes: ProgressHook = lambda n: None) -> Placed:
    """Make `destination` hold `version` (uploading from its local folder where it is not there yet), then verify."""
    try:
        stored = destination.manifest()
        uploaded = False
        if stored is None:
            if version.local_dir is None:
                raise UploadError(
                    f"{version.uri} holds nothing yet and version {version.version} of {version.name} "
                    f"has no artifact folder on this machine to upload from: publish it to this store "
                    f"or upload it there first"
                )
            source = _local_manifest(version, version.local_dir)
            destination.check_bucket()
            destination.root.write_version(version.local_dir, destination.leaf, source, {}, on_bytes=on_bytes)
            uploaded = True
        manifest = destination.verify(version.digest, on_bytes=on_bytes)
    except _storage_errors() as err:
        raise UploadError(f"cannot write or read {version.uri}: {_reason(err)}; nothing was applied") from err
    return Placed(version.uri, version.digest, sum(entry.bytes for entry in manifest.files.values()), uploaded)


def _local_manifest(version: ModelVersion, folder: Path) -> Manifest:
    try:
        manifest = read_manifest(folder)
    except ArtifactError as err:
        raise UploadError(str(err)) from err
    if f"sha256:{manifest.digest}" != version.digest:
        raise UploadError(
            f"{folder} is not version {version.version} (its digest is {manifest.digest[:12]}..., "
            f"the record's {version.digest.removeprefix('sha256:')[:12]}...): nothing uploaded"
        )
    return manifest


def _storage_errors() -> tuple[type[Exception], ...]:
    """What an unreachable store or a refused request raises through fsspec's drivers (s3fs lets botocore's
    connection errors through untranslated)."""
    errors: tuple[type[Exception], ...] = (OSError, ValueError)
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return errors
    return (*errors, BotoCoreError, ClientError)


def _reason(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"{type(err).__name__}: {text}"
