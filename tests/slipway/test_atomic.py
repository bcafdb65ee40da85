import json
import os

import pytest

from slipway import atomic
from slipway.cli import UserError


def test_write_json_replaces_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "report.json"
    atomic.write_json(path, {"a": 1})
    atomic.write_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def test_staged_dir_failure_keeps_the_old_folder_intact(tmp_path):
    final = tmp_path / "artifact"
    with atomic.staged_dir(final) as staging:
        (staging / "model.onnx").write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic.staged_dir(final) as staging:
        (staging / "model.onnx").write_bytes(b"new, half written")
        raise RuntimeError("crash mid-write")
    assert (final / "model.onnx").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_staged_dir_swaps_in_new_content(tmp_path):
    final = tmp_path / "artifact"
    for content in (b"v1", b"v2"):
        with atomic.staged_dir(final) as staging:
            (staging / "model.onnx").write_bytes(content)
    assert (final / "model.onnx").read_bytes() == b"v2"
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_staged_dir_refuses_to_replace_an_immutable_folder(tmp_path):
    final = tmp_path / "v1"
    final.mkdir()
    with pytest.raises(FileExistsError), atomic.staged_dir(final, replace=False):
        pass


def test_staged_dir_refuses_a_folder_of_the_users_files_and_keeps_them(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="choose another output folder .* or remove it"), atomic.staged_dir(final) as staging:
        (staging / "all.yaml").write_text("new")
    assert [p.name for p in final.iterdir()] == ["notes.txt"] and (final / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left


def test_staged_dir_refuses_to_turn_a_file_into_a_folder(tmp_path):
    final = tmp_path / "out"
    final.write_text("mine")
    with pytest.raises(UserError, match="is a file"), atomic.staged_dir(final):
        pass
    assert final.read_text() == "mine"


def test_staged_dir_replaces_its_own_output_or_an_empty_folder(tmp_path):
    final = tmp_path / "out"
    final.mkdir()  # empty: nothing to lose
    for content in ("v1", "v2"):
        with atomic.staged_dir(final) as staging:
            (staging / "all.yaml").write_text(content)
    assert (final / "all.yaml").read_text() == "v2" and (final / atomic.OUTPUT_MARKER).is_file()


def test_staged_dir_lets_the_caller_recognise_its_outputs(tmp_path):
    final = tmp_path / "artifact"
    final.mkdir()
    (final / "manifest.json").write_text("{}")  # written before markers existed, or by another tool
    with atomic.staged_dir(final, owns=lambda folder: (folder / "manifest.json").is_file()) as staging:
        (staging / "manifest.json").write_text("new")
    assert [p.name for p in final.iterdir()] == ["manifest.json"]  # the caller's own outputs carry no marker
    with pytest.raises(UserError), atomic.staged_dir(final, owns=lambda folder: False):
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
