"""`python -m export versions ...` as a user runs it: every command, its JSON, and its failure paths."""

import json

import pytest

from export.cli import main
from slipway.cli import run
from tests.store.conftest import make_artifact, versions, versions_json

COMMANDS = ["publish", "list", "show", "promote", "rollback", "history", "diff", "gc", "verify"]


def test_every_command_works_end_to_end_with_json(store_dir, artifact_factory, tmp_path):
    store = ["--store", str(store_dir)]
    reports = ["--reports", str(tmp_path / "no-reports")]
    first = versions_json(
        "publish",
        str(artifact_factory(1.0)),
        "--model",
        "tiny",
        "--tag",
        "champion",
        "--metric",
        "accuracy=0.91",
        *reports,
        *store,
    )
    assert first["created"] and first["ref"] == "tiny:1" and first["tags"] == ["champion"]
    assert first["metrics"] == {"accuracy": 0.91} and first["notes"]  # no reports: the lineage says so
    again = versions_json("publish", str(artifact_factory(1.0)), *reports, *store)  # model name from the settings
    assert not again["created"] and again["version"] == "1"
    versions_json("publish", str(artifact_factory(2.0)), "--model", "tiny", "--metric", "accuracy=0.95", *reports, *store)

    # The record deployments read: name, version (a string), uri (absolute file:// URL), digest, tags.
    record = versions_json("show", "tiny@champion", *store)
    assert {"name": "tiny", "version": "1", "tags": ["champion"]}.items() <= record.items()
    assert record["uri"] == (store_dir / "artifacts" / "tiny" / "1").resolve().as_uri()
    assert len(record["digest"]) == 64

    assert [r["ref"] for r in versions_json("list", *store)] == ["tiny:2", "tiny:1"]
    move = versions_json("promote", "champion", "tiny:latest", *store)
    assert (move["version"], move["previous"], move["action"]) == ("2", "1", "promote")
    diff = versions_json("diff", "tiny:1", "tiny@champion", *store)
    accuracy = next(row for row in diff["rows"] if row["field"] == "metrics.accuracy")
    assert (accuracy["a"], accuracy["b"]) == (0.91, 0.95) and accuracy["change"] == pytest.approx(0.04)
    back = versions_json("rollback", "champion", *store)  # a bare tag: the only model carrying it
    assert (back["version"], back["previous"], back["action"]) == ("1", "2", "rollback")
    assert [m["action"] for m in versions_json("history", "tiny@champion", *store)] == ["promote", "promote", "rollback"]
    assert versions_json("verify", "tiny:2", *store)["verified"] is True
    gc = versions_json("gc", "--keep", "0", *store)
    assert gc["deleted"] == ["tiny:2"] and gc["kept_for_tags"] == {"tiny:1": ["champion"]}
    assert not (store_dir / "artifacts" / "tiny" / "2").exists()


def test_human_output_reads_well(store_dir, artifact_factory):
    store = ["--store", str(store_dir)]
    published = versions("publish", str(artifact_factory(1.0)), "--tag", "v1.0", *store)
    assert "published tiny:1" in published.stdout and "tags: v1.0" in published.stdout
    assert "tiny:1" in versions("list", *store).stdout
    shown = versions("show", "tiny:1", *store).stdout
    assert "parameters" not in shown and "file://" in shown and "lineage.git.commit" in shown
    assert "nothing changed" in versions("promote", "v1.0", "tiny:1", *store).stdout
    assert "would delete 0 version(s)" in versions("gc", "--keep", "1", "--dry-run", *store).stdout


def in_process(capsys, *args: str) -> tuple[int, str, str]:
    """The same command in this process (through `slipway.cli.run`, as `python -m export` runs it): quicker."""
    code = run(main, ["versions", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["versions", command, "--help"])
    help_text = capsys.readouterr().out
    assert exited.value.code == 0 and "--store" in help_text and "--json" in help_text


def test_mistakes_are_one_line_and_exit_2(store_dir, artifact_factory, tmp_path, capsys):
    store = ["--store", str(store_dir)]
    code, _, err = in_process(capsys, "list", *store)
    assert code == 2 and "no model store at" in err
    assert not store_dir.exists()
    in_process(capsys, "publish", str(artifact_factory(1.0)), "--model", "a", "--tag", "champion", *store)
    in_process(capsys, "publish", str(artifact_factory(1.0)), "--model", "b", "--tag", "champion", *store)
    for args, message in [
        (["show", "a"], "bad reference 'a': use NAME:NUMBER"),
        (["show", "a:7"], "model 'a' has no version 7 (versions: 1)"),
        (["show", "zzz@champion"], "no model 'zzz' in the store (models: a, b)"),
        (["rollback", "champion"], "models a, b all carry it; name the model as NAME@champion or with --model"),
        (["rollback", "a@champion"], "a@champion points at version 1 and has no earlier version to roll back to"),
        (["promote", "b@champion", "a:1"], "tag 'b@champion' belongs to model 'b' but 'a:1' is a version of 'a'"),
        (["promote", "latest", "a:1"], "tag 'latest' is reserved"),
        (["gc", "--keep", "-1"], "--keep must be 0 or more"),
        (["publish", str(tmp_path), "--model", "a"], "manifest.json is missing"),
        (["publish", str(tmp_path / "absent"), "--model", "a"], "manifest.json is missing"),
        (["publish", str(artifact_factory(2.0)), "--metric", "accuracy"], "--metric 'accuracy': write NAME=NUMBER"),
        (["publish", str(artifact_factory(2.0)), "--model", "bad name"], "model name 'bad name' is not valid"),
        (["history", "a@nonexist"], "model 'a' has no tag 'nonexist' (tags: champion)"),  # as rollback says it
        (["history", "zzz@champion"], "no model 'zzz' in the store (models: a, b)"),
        (["show", ":1"], "reference ':1' names no model and models a, b all match: write NAME:1"),
        (["promote", "champion", "@champion"], "reference '@champion' names no model and models a, b all match"),
    ]:
        code, out, err = in_process(capsys, *args, *store)
        assert code == 2, (args, err)
        assert message in " ".join(err.split()), (args, err)
        assert "Traceback" not in err and out == ""


def _with_settings(folder, settings: bytes):
    """`folder` with its model-settings.json replaced and its manifest re-hashed (a consistent artifact)."""
    from slipway.artifact import write_manifest

    (folder / "model-settings.json").write_bytes(settings)
    write_manifest(folder)
    return str(folder)


def _one_line(code: int, out: str, err: str, message: str) -> None:
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_a_refused_publish_creates_no_store(store_dir, artifact_factory, tmp_path, capsys):
    store = ["--store", str(store_dir)]
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "manifest.json").write_text("[]")
    for args, message in [
        (["publish", str(artifact_factory(1.0)), "--tag", "bad tag"], "tag 'bad tag' is not valid"),
        (["publish", str(artifact_factory(1.0)), "--model", "bad name"], "model name 'bad name' is not valid"),
        (["publish", _with_settings(artifact_factory(2.0), b'{"implementation": "x"}')], "names no model: pass --model NAME"),
        (
            ["publish", _with_settings(artifact_factory(3.0), b"{not json"), "--model", "a"],
            "model-settings.json is not JSON (Expecting property name",
        ),
        (
            ["publish", _with_settings(artifact_factory(4.0), b"\xff\xfe"), "--model", "a"],
            "model-settings.json is not UTF-8 text (byte 0xff at line 1, column 1",
        ),
        (["publish", str(listed)], "manifest.json is not a valid manifest: manifest: Input should be a valid dictionary"),
    ]:
        _one_line(*in_process(capsys, *args, *store), message)
        assert not store_dir.exists(), args


def test_damaged_reports_are_one_line_and_odd_ones_are_ignored(store_dir, artifact_factory, tmp_path, capsys):
    store = ["--store", str(store_dir)]
    reports = tmp_path / "reports"
    reports.mkdir()
    for text, why in (('{"variants": [', "Expecting value"), ("[1, 2]", "a JSON list, not an object")):
        (reports / "export.json").write_text(text)
        code, out, err = in_process(capsys, "publish", str(artifact_factory(1.0)), "--reports", str(reports), *store)
        _one_line(code, out, err, "export.json is not a readable report (")
        assert why in err and "run the step that writes it again, or delete it" in err
        assert not store_dir.exists()
    (reports / "export.json").write_text(json.dumps({"variants": 5, "source_model": 7}))  # an object, but not ours
    code, _, err = in_process(capsys, "publish", str(artifact_factory(1.0)), "--reports", str(reports), *store)
    assert code == 0 and "describes another artifact" in err


def test_a_stored_manifest_that_is_not_an_object_fails_verify_in_one_line(store_dir, artifact_factory, capsys):
    store = ["--store", str(store_dir)]
    in_process(capsys, "publish", str(artifact_factory(1.0)), *store)
    (store_dir / "artifacts" / "tiny" / "1" / "manifest.json").write_text("[]")
    _one_line(
        *in_process(capsys, "verify", "tiny:1", *store),
        "has no readable manifest.json (manifest: Input should be a valid dictionary",
    )


def test_a_store_in_the_cloud_is_refused_with_what_to_do(capsys):
    code, out, err = in_process(capsys, "list", "--store", "s3://bucket/store")  # s3fs or not: the database is local
    _one_line(code, out, err, "the store's SQLite database needs a local disk")
    assert "--artifact-root s3://" in err and "pip install 'slipway[cloud]'" in err


def test_a_corrupt_store_is_one_line_not_a_traceback(store_dir, artifact_factory):
    versions("publish", str(artifact_factory(1.0)), "--store", str(store_dir))
    db = store_dir / "store.db"
    for suffix in ("-wal", "-shm"):
        (store_dir / f"store.db{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"\0garbage" * 4096)
    for args in (["list"], ["show", "tiny:1"], ["publish", str(artifact_factory(2.0))], ["gc", "--keep", "1"]):
        result = versions(*args, "--store", str(store_dir), check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "is unreadable (file is not a database)" in lines[0], result.stderr
    stray = store_dir.parent / "not-a-store"
    stray.write_text("a file")
    result = versions("list", "--store", str(stray), check=False)
    assert result.returncode == 2 and "is a file, not a store folder" in result.stderr


def test_json_output_is_pure_json_on_stdout(store_dir, artifact_factory):
    result = versions("publish", str(artifact_factory(1.0)), "--store", str(store_dir), "--json")
    assert json.loads(result.stdout)["ref"] == "tiny:1"
    assert "note:" in result.stderr  # messages stay off stdout


def test_a_users_own_model_keeps_its_name_from_publish_to_deploy(store_dir, tmp_path):
    """`make convert NAME=mine` then `make publish`, `make promote`, `make deploy VERSION=|TAG=`, as make runs them
    with MODEL_NAME unset: the version is mine's, and the references without a name find it."""
    build = tmp_path / "build"
    make_artifact(build / "artifacts" / "mine", 1.0, name="mine")
    store = ["--store", str(store_dir)]
    env = {"SLIPWAY_BUILD_DIR": str(build)}
    assert versions_json("publish", "--model", "mine", *store, env=env)["ref"] == "mine:1"  # build/artifacts/mine
    second = make_artifact(tmp_path / "elsewhere", 2.0, name="mine")
    assert versions_json("publish", str(second), *store)["ref"] == "mine:2"  # the artifact's own name
    assert versions_json("promote", "champion", ":1", *store)["model"] == "mine"
    assert versions_json("show", "@champion", *store)["name"] == "mine"
    assert versions_json("show", ":latest", *store)["version"] == "2"
    diff = versions_json("diff", ":1", ":2", *store)
    assert (diff["a"]["ref"], diff["b"]["ref"]) == ("mine:1", "mine:2")


def test_make_rollback_moves_the_tag_then_redeploys_it():
    import subprocess

    from slipway.paths import PROJECT_ROOT

    result = subprocess.run(
        ["make", "-n", "rollback", "TAG=champion", "STORE=/srv/store"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    rollback = next(i for i, line in enumerate(lines) if "slipway versions rollback champion --store /srv/store" in line)
    deploy = next(i for i, line in enumerate(lines) if "slipway deploy" in line)
    assert rollback < deploy
