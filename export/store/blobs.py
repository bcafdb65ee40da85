"""Artifact folders on any fsspec filesystem: the local disk by default, s3:// or gs:// for clusters.

A version's folder is written file by file while each file is hashed on the way, so what
lands in the store is exactly what the manifest says (a source that changes mid-publish
is caught). `manifest.json` is written last. Visibility is the database's job: a folder
only becomes a version when its record is committed, so a half-written folder is never
served; `gc` removes folders no record claims.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from export.store.db import StoreError
from slipway.artifact import MANIFEST_NAME, FileEntry, Manifest, folder_digest

CHUNK = 1 << 20
ProgressHook = Callable[[int], None]


def _manifest_bytes(manifest: Manifest) -> bytes:
    """The manifest as `slipway.artifact.write_manifest` writes it (indented, sorted keys)."""
    return (json.dumps(manifest.model_dump(), indent=2, sort_keys=True) + "\n").encode()


class ArtifactRoot:
    """The folder (fsspec URL) under which every version's artifact folder lives, as `<model>/<number>`."""

    def __init__(self, url: str, **storage_options):
        try:
            self.fs, self.root = url_to_fs(url, **storage_options)
        except (ImportError, ValueError) as err:
            raise StoreError(
                f"cannot open artifact storage {url!r} ({err}); for s3:// or gs:// install the `cloud` extra "
                "(pip install 'slipway[cloud]')"
            ) from err
        self.root = self.root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def uri(self, relative: str) -> str:
        """The URL a SeldonDeployment's `modelUri` (or anyone with fsspec) pulls the folder from."""
        return self.fs.unstrip_protocol(self._path(relative))

    def exists(self, relative: str) -> bool:
        return self.fs.exists(self._path(relative))

    def write_version(
        self,
        source: Path,
        relative: str,
        source_manifest: Manifest,
        replaced: dict[str, bytes],
        on_bytes: ProgressHook | None = None,
        after_first_file: Callable[[], None] | None = None,
    ) -> Manifest:
        """Copy `source` to `relative`, with `replaced` files' content swapped in, and write its manifest.

        Each copied file is hashed as it streams and must match `source_manifest`; the new
        manifest reuses those hashes, so a large model is read once here.
        """
        target = self._path(relative)
        self.fs.makedirs(target, exist_ok=True)
        files: dict[str, FileEntry] = {}
        names = sorted(set(source_manifest.files) | set(replaced))
        for index, name in enumerate(names):
            if name in replaced:
                data = replaced[name]
                self._write_bytes(f"{target}/{name}", data)
                files[name] = FileEntry(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
            else:
                files[name] = self._copy_checked(source / name, f"{target}/{name}", source_manifest.files[name], on_bytes)
            if index == 0 and after_first_file is not None:
                after_first_file()
        manifest = Manifest(digest=folder_digest(files), files=files)
        self._write_bytes(f"{target}/{MANIFEST_NAME}", _manifest_bytes(manifest))
        if self.local:
            _fsync_tree(Path(target))
        return manifest

    def _write_bytes(self, path: str, data: bytes) -> None:
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as handle:
            handle.write(data)

    def _copy_checked(self, source: Path, path: str, expected: FileEntry, on_bytes: ProgressHook | None) -> FileEntry:
        digest, size = hashlib.sha256(), 0
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with open(source, "rb") as reader, self.fs.open(path, "wb") as writer:
            while chunk := reader.read(CHUNK):
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        if digest.hexdigest() != expected.sha256 or size != expected.bytes:
            raise StoreError(
                f"{source} changed while it was being published (its sha256 no longer matches the manifest); nothing was published"
            )
        return FileEntry(sha256=expected.sha256, bytes=size)

    def read_manifest(self, relative: str) -> Manifest:
        """The stored folder's manifest (for verification)."""
        with self.fs.open(self._path(f"{relative}/{MANIFEST_NAME}"), "rb") as handle:
            return Manifest.model_validate(json.loads(handle.read()))

    def file_sha256(self, relative: str, name: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(self._path(f"{relative}/{name}"), "rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def file_names(self, relative: str) -> set[str]:
        """Every file under a version's folder, relative to it."""
        base = self._path(relative)
        return {path[len(base) + 1 :] for path in self.fs.find(base)}

    def remove(self, relative: str) -> None:
        """Delete a version's folder; a folder already gone is fine (gc and crash clean-up repeat this)."""
        path = self._path(relative)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def version_folders(self) -> set[str]:
        """Every `<model>/<number>` folder present, whether or not a record claims it."""
        if not self.fs.exists(self.root):
            return set()
        found = set()
        for model_dir in self.fs.ls(self.root, detail=True):
            if model_dir["type"] != "directory":
                continue
            model = model_dir["name"].rstrip("/").rsplit("/", 1)[-1]
            for version_dir in self.fs.ls(model_dir["name"], detail=True):
                if version_dir["type"] == "directory":
                    found.add(f"{model}/{version_dir['name'].rstrip('/').rsplit('/', 1)[-1]}")
        return found


def _fsync_tree(folder: Path) -> None:
    """Flush a local version folder to disk before its record commits (survives power loss, not just SIGKILL)."""
    for path in [*folder.rglob("*"), folder]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
