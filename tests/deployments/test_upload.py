"""The storage Secret made from the environment and read back as fsspec options, and the upload's guarantees
on a filesystem every machine has: a pvc:// claim mounted here. (The S3 road, with a real S3 server and
rclone, runs on the local cluster: tests/localcluster/test_storage.py.)"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from deployments.render.records import ModelVersion
from deployments.rollout.storage_secret import (
    SecretError,
    fsspec_options,
    missing_keys,
    secret_manifest,
    settings_from_environment,
)
from deployments.rollout.upload import Destination, UploadError, place
from slipway.artifact import SETTINGS_FILE, verify_artifact, write_manifest

KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"}


def test_s3_keys_and_a_custom_endpoint_become_rclone_settings_and_back():
    settings, used = settings_from_environment(
        "s3", {**KEYS, "AWS_ENDPOINT_URL": "http://minio:9000", "AWS_REGION": "eu-west-1", "UNRELATED": "x"}
    )
    assert settings == {
        "RCLONE_CONFIG_S3_TYPE": "s3",
        "RCLONE_CONFIG_S3_PROVIDER": "Other",
        "RCLONE_CONFIG_S3_ENV_AUTH": "false",
        "RCLONE_CONFIG_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
        "RCLONE_CONFIG_S3_ENDPOINT": "http://minio:9000",
        "RCLONE_CONFIG_S3_REGION": "eu-west-1",
    }
    assert used == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"]
    assert missing_keys("s3", settings) == []
    assert fsspec_options("s3", settings) == {
        "key": "AKIDEXAMPLE",
        "secret": "wJalrXUtnFEMI/K7MDENG",
        "endpoint_url": "http://minio:9000",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
    }
    # the pods' address is not this machine's: --storage-endpoint wins for the upload only
    assert fsspec_options("s3", settings, endpoint="http://127.0.0.1:9000")["endpoint_url"] == "http://127.0.0.1:9000"


def test_without_keys_the_pods_authenticate_as_their_service_account():
    settings, used = settings_from_environment("s3", {"AWS_REGION": "us-east-2"})
    assert settings["RCLONE_CONFIG_S3_ENV_AUTH"] == "true" and settings["RCLONE_CONFIG_S3_PROVIDER"] == "AWS"
    assert "RCLONE_CONFIG_S3_ACCESS_KEY_ID" not in settings and missing_keys("s3", settings) == []
    assert fsspec_options("s3", settings) == {"client_kwargs": {"region_name": "us-east-2"}}  # boto's own chain


@pytest.mark.parametrize(
    "env, message",
    [
        ({"AWS_ACCESS_KEY_ID": "AKID"}, "AWS_SECRET_ACCESS_KEY is not set while its pair is"),
        ({"AWS_SECRET_ACCESS_KEY": "s"}, "AWS_ACCESS_KEY_ID is not set while its pair is"),
    ],
)
def test_half_a_key_pair_is_refused(env, message):
    with pytest.raises(SecretError, match=message):
        settings_from_environment("s3", env)


def test_gs_reads_the_service_account_key_file(tmp_path):
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "client_email": "a@b"}))
    settings, used = settings_from_environment("gs", {"GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert settings["RCLONE_CONFIG_GS_TYPE"] == "google cloud storage" and used == ["GOOGLE_APPLICATION_CREDENTIALS"]
    assert fsspec_options("gs", settings) == {"token": {"type": "service_account", "client_email": "a@b"}}
    key.write_text("not json")
    with pytest.raises(SecretError, match="is not a readable JSON key file"):
        settings_from_environment("gs", {"GOOGLE_APPLICATION_CREDENTIALS": str(key)})
    assert fsspec_options("gs", settings_from_environment("gs", {})[0]) == {"token": "google_default"}


def test_the_secret_holds_exactly_the_settings_base64_encoded():
    settings, _ = settings_from_environment("s3", KEYS)
    manifest = secret_manifest("store", "ml", settings)
    assert manifest["metadata"]["name"] == "store" and manifest["metadata"]["namespace"] == "ml"
    assert {key: base64.b64decode(value).decode() for key, value in manifest["data"].items()} == settings


def test_a_secret_without_keys_that_says_to_use_keys_misses_them():
    settings = {"RCLONE_CONFIG_S3_TYPE": "s3", "RCLONE_CONFIG_S3_ENV_AUTH": "false"}
    assert missing_keys("s3", settings) == ["RCLONE_CONFIG_S3_ACCESS_KEY_ID", "RCLONE_CONFIG_S3_SECRET_ACCESS_KEY"]
    assert missing_keys("gs", {}) == ["RCLONE_CONFIG_GS_TYPE"]


# ------------------------------------------------------------------ upload through a mounted claim


def _version(artifact: Path, uri: str, tmp_path: Path, tag: str = "a") -> ModelVersion:
    folder = tmp_path / f"artifact-{tag}"
    shutil.copytree(artifact, folder)
    settings = json.loads((folder / SETTINGS_FILE).read_text())
    settings.setdefault("parameters", {})["version"] = tag
    (folder / SETTINGS_FILE).write_text(json.dumps(settings))
    digest = write_manifest(folder).digest
    return ModelVersion(name="digits", version=tag, uri=uri, digest=digest, local_dir=folder)


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_an_upload_lands_whole_verifies_and_is_found_again(digits_artifact, tmp_path):
    mount = tmp_path / "claim"
    version = _version(digits_artifact, "pvc://models/digits/1", tmp_path)
    seen = []
    placed = place(version, Destination(version.uri, {}, pvc_mount=mount), on_bytes=seen.append)
    assert placed.uploaded and placed.bytes == sum(
        p.stat().st_size for p in version.local_dir.iterdir() if p.name != "manifest.json"
    )
    assert sum(seen) == 2 * placed.bytes  # written, then read back
    assert verify_artifact(mount / "digits" / "1", version.digest.removeprefix("sha256:"))
    again = place(version, Destination(version.uri, {}, pvc_mount=mount))
    assert not again.uploaded and again.digest == version.digest


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_a_destination_with_other_bytes_is_refused_never_overwritten(digits_artifact, tmp_path):
    mount = tmp_path / "claim"
    first = _version(digits_artifact, "pvc://models/digits/1", tmp_path, "a")
    place(first, Destination(first.uri, {}, pvc_mount=mount))
    other = _version(digits_artifact, first.uri, tmp_path, "b")
    with pytest.raises(UploadError, match="a version is immutable"):
        place(other, Destination(other.uri, {}, pvc_mount=mount))
    stored = mount / "digits" / "1"
    (stored / "model.onnx").write_bytes(b"not the model")
    with pytest.raises(UploadError, match="model.onnx is not the file the manifest lists"):
        place(first, Destination(first.uri, {}, pvc_mount=mount))
    (stored / "model.onnx").write_bytes((first.local_dir / "model.onnx").read_bytes())
    (stored / "stray.txt").write_text("x")
    with pytest.raises(UploadError, match=r"does not hold exactly the version's files \(extra: \['stray.txt'\]"):
        place(first, Destination(first.uri, {}, pvc_mount=mount))


@pytest.mark.slow  # needs the trained digits model (digits_artifact)
def test_a_folder_that_is_not_the_record_s_version_is_not_uploaded(digits_artifact, tmp_path):
    version = _version(digits_artifact, "pvc://models/digits/1", tmp_path)
    wrong = version.model_copy(update={"digest": "sha256:" + "0" * 64})
    mount = tmp_path / "claim"
    with pytest.raises(UploadError, match="is not version a .*nothing uploaded"):
        place(wrong, Destination(wrong.uri, {}, pvc_mount=mount))
    assert not (mount / "digits").exists()


def test_a_record_without_a_local_folder_needs_the_bytes_already_there(tmp_path):
    version = ModelVersion(name="digits", version="3", uri="pvc://models/digits/3", digest="0" * 64)
    with pytest.raises(UploadError, match="holds nothing yet .* no artifact folder on this machine"):
        place(version, Destination(version.uri, {}, pvc_mount=tmp_path))


@pytest.mark.parametrize(
    "uri, kwargs, message",
    [
        ("pvc://models/digits/1", {}, "mount the claim on this machine and pass --pvc-mount DIR"),
        ("s3://bucket-only", {}, "names no folder inside a bucket"),
    ],
)
def test_a_destination_that_cannot_be_written_says_what_to_pass(uri, kwargs, message):
    with pytest.raises(UploadError, match=message):
        Destination(uri, {}, **kwargs)
