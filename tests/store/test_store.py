"""The store's rules, through its Python API: numbering, content addressing, tags, rollback, gc, integrity."""

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from export.store.db import StoreError
from export.store.refs import Ref
from export.store.store import ModelStore
from slipway.artifact import read_manifest, verify_artifact


@pytest.fixture
def store(store_dir):
    with ModelStore.open(store_dir, create=True) as opened:
        yield opened


def stored_folder(record) -> Path:
    assert record.uri.startswith("file:///")
    return Path(record.uri.removeprefix("file://"))


def test_publish_numbers_versions_and_stores_a_servable_copy(store, artifact_factory):
    first, created = store.publish(artifact_factory(1.0), "tiny")
    second, _ = store.publish(artifact_factory(2.0), "tiny", tag="v1.0")
    assert created and (first.version, second.version) == ("1", "2")
    assert second.tags == ["v1.0"] and first.tags == []
    folder = stored_folder(second)
    settings = json.loads((folder / "model-settings.json").read_text())
    assert settings["name"] == "tiny" and settings["parameters"]["version"] == "2"
    assert settings["implementation"] == "wrappers.runtime.OnnxRuntime"
    # The stored copy carries its own manifest: its digest is the record's, the source's is kept for dedup.
    assert verify_artifact(folder).digest == second.digest
    assert second.source_digest == read_manifest(artifact_factory(2.0)).digest != second.digest
    assert (folder / "model.onnx").read_bytes() == (artifact_factory(2.0) / "model.onnx").read_bytes()
    assert second.size_bytes == sum(p.stat().st_size for p in folder.iterdir() if p.name != "manifest.json")


def test_identical_content_returns_the_existing_version(store, artifact_factory):
    record, _ = store.publish(artifact_factory(1.0), "tiny")
    copy, created = store.publish(artifact_factory(1.0), "tiny", tag="champion")
    assert not created and copy.version == record.version and copy.digest == record.digest
    assert copy.tags == ["champion"]  # the tag asked for lands on the existing version
    assert [r.version for r in store.list("tiny")] == ["1"]
    other, created = store.publish(artifact_factory(1.0), "other")  # another model's versions are its own
    assert created and other.ref == "other:1"
    assert json.loads((stored_folder(other) / "model-settings.json").read_text())["name"] == "other"


def test_lookup_by_number_tag_and_latest(store, artifact_factory):
    for offset in (1.0, 2.0, 3.0):
        store.publish(artifact_factory(offset), "tiny")
    store.promote("champion", Ref("tiny", number=2))
    assert store.get(Ref("tiny")).version == "3"
    assert store.get(Ref("tiny", tag="champion")).version == "2"
    assert [r.version for r in store.list()] == ["3", "2", "1"]
    with pytest.raises(StoreError, match=r"model 'tiny' has no version 9 \(versions: 1, 2, 3\)"):
        store.get(Ref("tiny", number=9))
    with pytest.raises(StoreError, match=r"has no tag 'canary' \(tags: champion\)"):
        store.get(Ref("tiny", tag="canary"))
    with pytest.raises(StoreError, match=r"no model 'nope' in the store \(models: tiny\)"):
        store.list("nope")


def test_rollback_walks_back_through_the_tag_history(store, artifact_factory):
    for offset in (1.0, 2.0, 3.0):
        store.publish(artifact_factory(offset), "tiny")
    for number in (1, 2, 3):
        store.promote("champion", Ref("tiny", number=number))
    assert not store.promote("champion", Ref("tiny", number=3)).changed  # no move, nothing recorded
    assert store.rollback("tiny", "champion").version == "2"
    assert store.rollback("tiny", "champion").version == "1"
    with pytest.raises(StoreError, match="has no earlier version to roll back to"):
        store.rollback("tiny", "champion")
    history = store.tag_history("tiny", "champion")
    assert [(m.action, m.version, m.previous) for m in history] == [
        ("promote", "1", None),
        ("promote", "2", "1"),
        ("promote", "3", "2"),
        ("rollback", "2", "3"),
        ("rollback", "1", "2"),
    ]
    # A promote after rollbacks starts a new branch: rolling back returns to where it was promoted from.
    store.promote("champion", Ref("tiny", number=3))
    assert store.rollback("tiny", "champion").version == "1"


def test_gc_deletes_records_and_files_but_never_what_a_tag_needs(store, artifact_factory):
    records = [store.publish(artifact_factory(float(i)), "tiny")[0] for i in range(1, 6)]
    store.promote("champion", Ref("tiny", number=1))
    store.promote("champion", Ref("tiny", number=2))  # rollback target: 1
    dry = store.gc(1, dry_run=True)
    assert dry.deleted == ["tiny:4", "tiny:3"] and all(stored_folder(r).is_dir() for r in records)
    result = store.gc(1)
    assert result.deleted == ["tiny:4", "tiny:3"]
    assert result.kept_for_tags == {"tiny:2": ["champion"], "tiny:1": ["champion (rollback)"]}
    assert [r.version for r in store.list("tiny")] == ["5", "2", "1"]
    assert [stored_folder(r).exists() for r in records] == [True, True, False, False, True]
    assert sorted(result.removed_folders) == ["tiny/3", "tiny/4"]
    # Numbers are never reused, even after a delete.
    assert store.publish(artifact_factory(9.0), "tiny")[0].version == "6"
    with pytest.raises(StoreError, match="--keep must be 0 or more"):
        store.gc(-1)


def test_rollback_skips_versions_gc_deleted_long_ago(store, artifact_factory):
    for offset in (1.0, 2.0, 3.0):
        store.publish(artifact_factory(offset), "tiny")
        store.promote("champion", Ref("tiny", number=int(offset)))
    assert store.gc(0).deleted == ["tiny:1"]  # 3 is tagged, 2 is its rollback target
    assert store.rollback("tiny", "champion").version == "2"
    with pytest.raises(StoreError, match="no earlier version"):
        store.rollback("tiny", "champion")


def test_the_database_itself_refuses_what_must_never_happen(store, artifact_factory):
    store.publish(artifact_factory(1.0), "tiny", tag="champion")
    conn = sqlite3.connect(store.db_path)
    conn.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.DatabaseError, match="published versions are immutable"):
        conn.execute("UPDATE versions SET digest = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("DELETE FROM versions")  # champion points at it
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM tag_events")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE tag_events SET number = 7")
    with pytest.raises(sqlite3.DatabaseError, match="a tag must point at a published version"):
        conn.execute("UPDATE tags SET version_id = 42")
    conn.close()


def test_a_tampered_source_is_refused_and_leaves_nothing(store, artifact_factory):
    source = artifact_factory(1.0)
    (source / "model.onnx").write_bytes(b"\x08\x09not the exported graph")
    with pytest.raises(StoreError, match=r"cannot publish: .*model\.onnx does not match its sha256"):
        store.publish(source, "tiny")
    (source / "manifest.json").unlink()
    with pytest.raises(StoreError, match="manifest.json is missing"):
        store.publish(source, "tiny")
    assert store.list() == [] and not store.artifacts.version_folders()


def test_a_source_changing_mid_copy_publishes_nothing(store, artifact_factory):
    source = artifact_factory(1.0)

    def change_model_once(_bytes: int) -> None:  # after the first chunk (input-example.npz) is copied
        if (source / "model.onnx").read_bytes() != b"changed":
            (source / "model.onnx").write_bytes(b"changed")

    with pytest.raises(StoreError, match="changed while it was being published"):
        store.publish(source, "tiny", on_bytes=change_model_once)
    assert store.list() == [] and not store.artifacts.version_folders()
    with sqlite3.connect(store.db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0] == 0


def test_verify_finds_changed_missing_and_added_files(store, artifact_factory):
    record, _ = store.publish(artifact_factory(1.0), "tiny")
    ref = Ref("tiny", number=1)
    assert store.verify(ref).digest == record.digest
    folder = stored_folder(record)
    (folder / "notes.txt").write_text("added later")
    with pytest.raises(StoreError, match="files its manifest does not list: notes.txt"):
        store.verify(ref)
    (folder / "notes.txt").unlink()
    original = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(original + b"\0")
    with pytest.raises(StoreError, match="model.onnx does not match its sha256"):
        store.verify(ref)
    (folder / "model.onnx").unlink()
    with pytest.raises(StoreError, match="model.onnx is missing"):
        store.verify(ref)


def test_artifacts_can_live_at_any_fsspec_url(store_dir, artifact_factory):
    import fsspec

    with ModelStore.open(store_dir, create=True, artifact_root="memory://slipway-test/models") as store:
        record, _ = store.publish(artifact_factory(1.0), "tiny", tag="champion")
        assert record.uri == "memory:///slipway-test/models/tiny/1"
        assert store.verify(Ref("tiny", tag="champion")).digest == record.digest
        stored = json.loads(fsspec.open(f"{record.uri}/model-settings.json").open().read())
        assert stored["parameters"]["version"] == "1"
        store.publish(artifact_factory(2.0), "tiny")
        store.promote("champion", Ref("tiny", number=2))
        assert store.gc(1).deleted == []  # 1 is champion's rollback target
    with ModelStore.open(store_dir) as reopened:  # the artifact root is remembered
        assert reopened.get(Ref("tiny")).uri == "memory:///slipway-test/models/tiny/2"
    with pytest.raises(StoreError, match="keeps its artifacts at memory://slipway-test/models"):
        ModelStore.open(store_dir, create=True, artifact_root="memory://elsewhere")


def test_a_store_with_versions_keeps_its_artifact_root(store, store_dir, artifact_factory):
    store.publish(artifact_factory(1.0), "tiny")
    with pytest.raises(StoreError, match=f"keeps its artifacts at {store_dir / 'artifacts'}, not memory://x"):
        ModelStore.open(store_dir, create=True, artifact_root="memory://x")
    with pytest.raises(StoreError, match="no model 'other' in the store"):
        store.gc(1, model="other")


def test_missing_corrupt_and_remote_stores_are_refused_clearly(tmp_path):
    with pytest.raises(StoreError, match="no model store at"):
        ModelStore.open(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()  # reading never creates a store
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "store.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="unreadable .*file is not a database"):
        ModelStore.open(tmp_path / "corrupt")
    with pytest.raises(StoreError, match="needs a local disk"):
        ModelStore.open("memory://somewhere")


def test_cloud_storage_without_its_driver_is_refused_before_anything_is_written(store_dir, monkeypatch):
    import importlib

    # gcsfs is installed here (tensorboard-plugin-profile brings it): its import fails as where it is not
    loaded = importlib.import_module("fsspec.registry")._registry  # the drivers fsspec has already imported
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    for protocol in ("gs", "gcs"):
        monkeypatch.delitem(loaded, protocol, raising=False)
    with pytest.raises(StoreError, match=r"install the `cloud` extra"):
        ModelStore.open(store_dir, create=True, artifact_root="gs://bucket/models")
    assert not store_dir.exists()


def test_a_folder_unknown_to_the_store_is_never_overwritten_or_collected(store, artifact_factory):
    stray = Path(store.artifacts.root) / "tiny" / "1"  # a local store: its root is a folder here
    stray.mkdir(parents=True)
    (stray / "model.onnx").write_bytes(b"someone else's")
    with pytest.raises(StoreError, match="already exists but this store has no record of it"):
        store.publish(artifact_factory(1.0), "tiny")
    result = store.gc(0)
    assert result.unknown_folders == ["tiny/1"] and (stray / "model.onnx").read_bytes() == b"someone else's"
