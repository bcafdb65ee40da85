"""The model version a rendering is pinned to: from the model store's version record, or an artifact folder.

The store's record (`python -m export versions show REF --json`) arrives as a file; it is
validated here once, at the edge, and nothing deeper re-reads it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from slipway.cli import one_line
from slipway.cluster_names import STORAGE_BUCKET
from slipway.files import FileProblem, read_json

# Where a version with no URI of its own is uploaded to and pulled from: <storage root>/<name>/<version>.
DEFAULT_STORAGE_ROOT = f"s3://{STORAGE_BUCKET}"
# A model's name becomes the SeldonDeployment's, the container's and a DNS label in Service names.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
_SHA256 = re.compile(r"^(sha256:)?([0-9a-f]{64})$")


class RecordError(ValueError):
    """A version record (or artifact) that cannot pin a deployment; the message says what to send instead."""


class ModelVersion(BaseModel):
    """One immutable model version: what the SeldonDeployment pulls and the digest it is annotated with."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(description="model name; becomes the SeldonDeployment, graph node and container name")
    version: str
    uri: str = Field(description="where the storage initializer pulls the artifact folder from")
    digest: str = Field(description="sha256 of the stored artifact, as `sha256:<hex>`")
    tags: tuple[str, ...] = ()
    local_dir: Path | None = Field(
        default=None, exclude=True, description="the artifact folder on this machine, where there is one: its settings are read"
    )
    lineage: Any = Field(
        default=None, exclude=True, description="the store's lineage, as the record has it: the gpu overlay reads its `numerics`"
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(
                f"{value!r} cannot name Kubernetes objects: use at most 40 lower-case letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: object) -> str:
        return str(value)

    @field_validator("digest")
    @classmethod
    def _sha256(cls, value: str) -> str:
        match = _SHA256.match(value.lower())
        if not match:
            raise ValueError(f"{value!r} is not a sha256 digest (64 hex digits, optionally prefixed `sha256:`)")
        return f"sha256:{match.group(2)}"

    @field_validator("uri")
    @classmethod
    def _pullable(cls, value: str) -> str:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme in ("file", "local", "memory") or value.startswith(("/", ".")):
            raise ValueError(
                f"{value!r} is on this machine, where the cluster's storage initializer cannot reach it; "
                "upload the version to object storage (s3://, gs://, pvc://...) and pass --model-uri"
            )
        if not scheme and ":" not in value:
            raise ValueError(f"{value!r} is not a URI the storage initializer can pull (s3://bucket/path, gs://..., pvc://...)")
        return value

    @classmethod
    def from_record_file(cls, path: Path, *, uri: str | None = None, storage_root: str = DEFAULT_STORAGE_ROOT) -> ModelVersion:
        """Read the store's JSON record; `uri` replaces the record's where the artifact was copied elsewhere.

        A record of a store on this machine (a `file://` URI) is pulled from `<storage_root>/<name>/<version>`,
        where `deploy` uploads it: the cluster cannot read this machine's disk.
        """
        record = _json_file(Path(path), f"version record {path}", "write it with `python -m export versions show REF --json`")
        return cls.from_record(record, source=f"version record {path}", uri=uri, storage_root=storage_root)

    @classmethod
    def from_record(
        cls, record: object, *, source: str, uri: str | None = None, storage_root: str = DEFAULT_STORAGE_ROOT
    ) -> ModelVersion:
        """The store's record as parsed JSON (`from_record_file` without the file); `source` names it in errors."""
        if not isinstance(record, dict):
            raise RecordError(f"{source} must be a JSON object with name, version, uri and digest")
        local_dir = _local_folder(record.get("uri"))
        if uri:
            record = {**record, "uri": uri}
        elif local_dir is not None:
            record = {**record, "uri": storage_uri(storage_root, record.get("name"), record.get("version"))}
        return cls._validated({**record, "local_dir": local_dir}, source=source)

    @classmethod
    def from_artifact(
        cls, model_dir: Path, *, version: str | None = None, uri: str | None = None, storage_root: str = DEFAULT_STORAGE_ROOT
    ) -> ModelVersion:
        """An unpublished artifact folder (the demo's): name and digest from its files, version from the digest."""
        from slipway.artifact import SETTINGS_FILE, ArtifactError, read_manifest

        settings_path = Path(model_dir) / SETTINGS_FILE
        if not settings_path.is_file():
            raise RecordError(f"{model_dir} is not an artifact folder (no {SETTINGS_FILE}); run `make demo` first")
        fix = "re-export the artifact (`python -m export convert`) or fix the file"
        settings = _json_file(settings_path, str(settings_path), fix)
        if not isinstance(settings, dict):
            settings = {}  # not a JSON object: it names no model (below)
        name = settings.get("name")
        if not isinstance(name, str) or not name:
            raise RecordError(f'{settings_path} names no model (a JSON object with a "name" string is expected); {fix}')
        try:
            digest = read_manifest(model_dir).digest
        except ArtifactError as err:
            raise RecordError(str(err)) from err
        parameters = settings.get("parameters")
        version = str(version or (parameters.get("version") if isinstance(parameters, dict) else None) or digest[:12])
        record = {
            "name": name,
            "version": version,
            "digest": digest,
            "local_dir": Path(model_dir),
            "uri": uri or storage_uri(storage_root, name, version),
        }
        return cls._validated(record, source=str(model_dir))

    @classmethod
    def _validated(cls, record: dict, *, source: str) -> ModelVersion:
        try:
            return cls.model_validate(record)
        except ValidationError as err:
            raise RecordError(f"{source}: {one_line(err, whole='record')}") from err


def storage_uri(root: str, name: object, version: object) -> str:
    """`<root>/<name>/<version>`: where a version without a URI of its own is uploaded and pulled from."""
    return f"{root.rstrip('/')}/{name}/{version}"


def _json_file(path: Path, what: str, fix: str) -> object:
    """A JSON file's content, or a `RecordError` saying what is wrong with it and `fix`."""
    try:
        return read_json(path, what)
    except FileProblem as err:
        raise RecordError(f"{err}; {fix}") from err


def _local_folder(uri: object) -> Path | None:
    """The folder a local store's record points at (`file://` or a path), where it is on this machine."""
    if not isinstance(uri, str) or not (uri.startswith(("file://", "/"))):
        return None
    from slipway.artifact import SETTINGS_FILE

    folder = Path(uri.removeprefix("file://"))
    return folder if (folder / SETTINGS_FILE).is_file() else None
