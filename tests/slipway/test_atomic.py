import json
import os

import pytest

from slipway import atomic


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
