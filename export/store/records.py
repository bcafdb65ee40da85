"""What the store hands out: version records, tag moves, gc results, and diffs between two versions.

A version record is the contract with `deployments` (read from a JSON file, never by
importing the store): `name`, `version` (a string), `uri`, `digest`, `tags` at least.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from pydantic import BaseModel, Field


class VersionRecord(BaseModel):
    """One published, immutable model version."""

    name: str = Field(description="model name; MLServer serves it as /v2/models/<name>")
    version: str = Field(description="the version number as a string; /v2/models/<name>/versions/<version>")
    ref: str = Field(description="`name:version`, usable wherever a REF is expected")
    uri: str = Field(description="fsspec URL of the stored artifact folder (a SeldonDeployment modelUri)")
    digest: str = Field(description="sha256 manifest digest of the stored folder, which MLServer verifies at load")
    source_digest: str = Field(description="manifest digest of the folder that was published; equal content, same version")
    tags: list[str] = Field(default_factory=list)
    size_bytes: int
    created_at: str
    created_by: str
    metrics: dict[str, float] = Field(default_factory=dict)
    lineage: dict[str, Any] = Field(default_factory=dict)


class TagMove(BaseModel):
    """One recorded move of a tag (promote or rollback)."""

    model: str
    tag: str
    action: str
    version: str
    previous: str | None
    at: str
    by: str
    changed: bool = True


class GcResult(BaseModel):
    """What `gc` deleted (records and files) and what it kept because a tag needs it."""

    deleted: list[str] = Field(default_factory=list)
    kept_for_tags: dict[str, list[str]] = Field(default_factory=dict)
    removed_folders: list[str] = Field(default_factory=list)
    unknown_folders: list[str] = Field(default_factory=list, description="folders no record or trash entry names: left alone")
    dry_run: bool = False


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys, so two records line up field by field."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(flatten(value[key], f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def diff_records(a: VersionRecord, b: VersionRecord) -> list[dict[str, Any]]:
    """Metrics and lineage side by side: one row per field, with the change for numbers."""
    sides = [
        {
            "digest": r.digest,
            "created_at": r.created_at,
            "created_by": r.created_by,
            "size_bytes": r.size_bytes,
            "tags": ", ".join(r.tags),
            **flatten(r.metrics, "metrics."),
            **flatten(r.lineage, "lineage."),
        }
        for r in (a, b)
    ]
    rows = []
    for field in sorted(set(sides[0]) | set(sides[1]), key=_field_order):
        left, right = sides[0].get(field), sides[1].get(field)
        row: dict[str, Any] = {"field": field, "a": left, "b": right, "same": left == right}
        if is_number(left) and is_number(right):
            row["change"] = right - left
        rows.append(row)
    return rows


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _field_order(field: str) -> tuple[int, str]:
    group = field.split(".", 1)[0]
    return ({"metrics": 1, "lineage": 2}.get(group, 0), field)
