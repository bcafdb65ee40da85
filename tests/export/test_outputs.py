"""Where export writes: it replaces its own previous outputs, never a folder of the user's files or a file."""

from __future__ import annotations

import pytest

from slipway.cli import UserError
from tests.conftest import run_module
from tests.export.test_import_onnx import QUICK, conv_model, save
from tests.store.conftest import make_artifact


def _refused(args: list[str], env: dict, expected: str) -> None:
    result = run_module("export", *args, env=env, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_import_refuses_the_users_folder_and_a_file_and_replaces_its_own(tmp_path, reports_env):
    model = save(conv_model(), tmp_path / "model.onnx")
    args = ["import", str(model), "--name", "m", "--variants", "fp32", "--report", "export-outputs", *QUICK]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    _refused(
        [*args, "--out", str(mine)],
        reports_env,
        "this command did not write, and replacing it would delete its files: choose another output folder (--out) or remove it",
    )
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me too")
    _refused([*args, "--out", str(a_file)], reports_env, "is a file, not an output folder")
    assert a_file.read_text() == "keep me too"
    out = tmp_path / "out"
    for _ in range(2):  # the second run replaces the first's variants
        run_module("export", *args, "--out", str(out), env=reports_env)
    assert [p.name for p in out.iterdir()] == ["fp32"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_an_artifact_replaces_an_artifact_only(tmp_path):
    from export.package import check_out_dir

    folder = make_artifact(tmp_path / "artifact", 1.0)
    make_artifact(folder, 2.0)  # `export convert` run again
    check_out_dir(folder)
    variants = tmp_path / "variants"
    make_artifact(variants / "fp32", 1.0)
    with pytest.raises(UserError, match="choose another output folder"):
        make_artifact(variants, 1.0)  # a folder of artifacts is not an artifact
    assert [p.name for p in variants.iterdir()] == ["fp32"]


def test_profile_refuses_a_trace_path_it_cannot_write(tmp_path, reports_env):
    folder = make_artifact(tmp_path / "artifact", 1.0)
    (tmp_path / "traces").mkdir()
    (tmp_path / "a-file").write_text("x")
    _refused(
        ["profile", str(folder), "--runs", "1", "--trace", str(tmp_path / "traces")],
        reports_env,
        f"--trace {tmp_path / 'traces'} is a folder: name the trace file",
    )
    _refused(
        ["profile", str(folder), "--runs", "1", "--trace", str(tmp_path / "a-file" / "t.json")],
        reports_env,
        f"{tmp_path / 'a-file'} is a file, not a folder; choose another --trace",
    )


@pytest.mark.parametrize("command", ["convert", "variants"])
def test_an_opset_the_keras_conversion_cannot_write_is_refused_before_any_work(tmp_path, reports_env, command):
    _refused(
        [command, "--opset", "13", "--out", str(tmp_path / "out")],
        reports_env,
        "argument --opset: opset 13 is too old for the Keras conversion: use 17 or newer",
    )
    assert not (tmp_path / "out").exists()
