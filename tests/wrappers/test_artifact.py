import json

import pytest

from wrappers.artifact import ArtifactError, build_manifest, verify_artifact, write_manifest


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
    with pytest.raises(ArtifactError, match="not a valid manifest"):
        verify_artifact(artifact)
    (artifact / "manifest.json").unlink()
    with pytest.raises(ArtifactError, match="manifest.json is missing"):
        verify_artifact(artifact)


def test_a_folder_without_a_model_has_no_manifest(tmp_path):
    with pytest.raises(ArtifactError, match="has no model.onnx"):
        build_manifest(tmp_path)
