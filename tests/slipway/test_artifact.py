import json
import subprocess
import sys

import pytest

from slipway.artifact import (
    EXPECTED_DIGESTS_ENV,
    ArtifactError,
    build_manifest,
    pinned_digest,
    verify_artifact,
    write_manifest,
)
from slipway.paths import PROJECT_ROOT

DIGEST_A, DIGEST_B = "a" * 64, "b" * 64


@pytest.fixture
def artifact(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"\x08\x07graph bytes")
    (folder / "model-settings.json").write_text(json.dumps({"name": "m"}))
    write_manifest(folder)
    return folder


def test_verify_accepts_an_untouched_artifact(artifact):
    manifest = verify_artifact(artifact)
    assert set(manifest.files) == {"model.onnx", "model-settings.json"}
    assert len(manifest.digest) == 64


def test_digest_depends_on_content_only(artifact, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in artifact.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert build_manifest(copy).digest == build_manifest(artifact).digest


def test_tampered_file_is_named(artifact):
    (artifact / "model.onnx").write_bytes(b"\x08\x07graph bytez")
    with pytest.raises(ArtifactError, match=r"model\.onnx does not match its sha256"):
        verify_artifact(artifact)


def test_missing_file_is_named(artifact):
    (artifact / "model-settings.json").unlink()
    with pytest.raises(ArtifactError, match=r"incomplete: model-settings\.json is listed in the manifest but missing"):
        verify_artifact(artifact)


def test_missing_or_corrupt_manifest(artifact):
    (artifact / "manifest.json").write_text("{not json")
    with pytest.raises(
        ArtifactError,
        match=r"manifest.json is not JSON \(Expecting property name .* at line 1, column 2\): write the artifact again",
    ):
        verify_artifact(artifact)
    (artifact / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        verify_artifact(artifact)


def test_a_folder_without_a_model_has_no_manifest(tmp_path):
    with pytest.raises(ArtifactError, match="has no model.onnx"):
        build_manifest(tmp_path)


def test_an_added_file_is_named(artifact):
    folder = artifact
    (folder / "sub").mkdir()
    (folder / "sub" / "model.onnx_data").write_bytes(b"external weights nobody published")
    with pytest.raises(ArtifactError, match=r"was modified: sub/model\.onnx_data is not listed in its manifest\.json"):
        verify_artifact(folder)


def test_a_pinned_digest_must_match(artifact):
    folder, manifest = artifact, build_manifest(artifact)
    assert verify_artifact(folder, expected_digest=manifest.digest) == manifest
    with pytest.raises(ArtifactError, match="is not the pinned version"):
        verify_artifact(folder, expected_digest=DIGEST_A)


def test_pins_are_read_per_model_and_version():
    env = {EXPECTED_DIGESTS_ENV: f"digits=sha256:{DIGEST_A}, digits:3={DIGEST_B}"}
    assert pinned_digest("digits", "3", env) == DIGEST_B
    assert pinned_digest("digits", "2", env) == DIGEST_A
    assert pinned_digest("digits", None, env) == DIGEST_A
    assert pinned_digest("other", "1", env) is None
    assert pinned_digest("digits", "1", {}) is None
    for bad in ("digits", "digits=sha256:abc", f"={DIGEST_A}", f"digits={DIGEST_A.upper()}"):
        with pytest.raises(ArtifactError, match="malformed: write NAME"):
            pinned_digest("digits", "1", {EXPECTED_DIGESTS_ENV: bad})


# Run in a fresh interpreter where every package outside the core's dependencies fails to import: the artifact
# contract (and the numerics read from it) and the V2 wire format clients build requests with (tritonclient only
# when a gRPC request is built) must load with `pip install slipway-serving` alone.
_CORE_ONLY = """
import importlib.abc, sys
BLOCKED = {"mlserver", "onnxruntime", "onnx", "tensorflow", "tf2onnx", "starlette", "fastapi", "grpc", "tritonclient",
           "engine", "wrappers", "export", "loadtest", "deployments", "benchmarks", "localcluster"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} imported by the core", name=name)
sys.meta_path.insert(0, Block())
import slipway.artifact, slipway.precision, slipway.v2_wire, slipway.v2_requests
print(sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED))
"""


def test_the_artifact_contract_needs_only_the_core_dependencies():
    result = subprocess.run(
        [sys.executable, "-c", _CORE_ONLY], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
