"""Shared pieces for the deployments tests: version records as the model store writes them."""

from __future__ import annotations

import json

import pytest

from deployments.render.records import ModelVersion


def record(version: str, digest_byte: str = "ab", **extra) -> dict:
    """A version record shaped like `python -m export versions show REF --json`."""
    return {
        "name": "digits",
        "version": version,
        "uri": f"s3://slipway-models/digits/{version}",
        "digest": digest_byte * 32,
        "tags": [],
        "created_at": "2026-01-01T00:00:00Z",
        **extra,
    }


@pytest.fixture(scope="session")
def main_version() -> ModelVersion:
    return ModelVersion.model_validate(record("3", "ab", tags=["champion"]))


@pytest.fixture(scope="session")
def canary_version() -> ModelVersion:
    return ModelVersion.model_validate(record("4", "cd"))


@pytest.fixture
def record_files(tmp_path):
    """Write records to files, as the Makefile glue does; returns a function version -> path."""

    def write(version: str, digest_byte: str = "ab", **extra):
        path = tmp_path / f"record-{version}.json"
        path.write_text(json.dumps(record(version, digest_byte, **extra)))
        return path

    return write
