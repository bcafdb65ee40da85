"""Crash safety and concurrency with real processes: SIGKILL at each stage, several publishers at once."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from export.store.refs import Ref
from export.store.store import PAUSE_ENV, ModelStore
from slipway.paths import PROJECT_ROOT
from tests.store.conftest import versions_json

PAUSE_TIMEOUT_S = 60


def start(*args: str, pause_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, **({PAUSE_ENV: pause_at} if pause_at else {})}
    return subprocess.Popen(
        [sys.executable, "-m", "export", "versions", *args],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_when_paused(process: subprocess.Popen, stage: str) -> None:
    """Wait for the 'paused at STAGE' line, then SIGKILL the process (no clean-up code can run)."""
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if line.strip() == f"paused at {stage}":
            break
        if not line and process.poll() is not None:
            pytest.fail(f"process ended before pausing at {stage}: {process.stdout.read()}")
    else:
        pytest.fail(f"process never paused at {stage}")
    process.send_signal(signal.SIGKILL)
    process.wait()  # reap it: a zombie would still look alive to the store


def pending_rows(store_dir) -> int:
    with sqlite3.connect(store_dir / "store.db") as conn:
        return conn.execute("SELECT COUNT(*) FROM versions WHERE state = 'pending'").fetchone()[0]


@pytest.fixture
def champion_store(store_dir, artifact_factory):
    with ModelStore.open(store_dir, create=True) as store:
        store.publish(artifact_factory(1.0), "tiny", tag="champion")
    return store_dir


@pytest.mark.parametrize("stage", ["reserved", "copying", "copied"])
def test_a_publish_killed_midway_leaves_no_half_version(champion_store, artifact_factory, stage):
    source = artifact_factory(2.0)
    kill_when_paused(start("publish", str(source), "--tag", "champion", "--store", str(champion_store), pause_at=stage), stage)
    folder = champion_store / "artifacts" / "tiny" / "2"
    assert pending_rows(champion_store) == 1 and folder.exists() == (stage != "reserved")
    with ModelStore.open(champion_store) as store:
        assert [r.version for r in store.list()] == ["1"]
        assert store.get(Ref("tiny", tag="champion")).version == "1"
        assert store.verify(Ref("tiny", tag="champion"))
        # The next publish reclaims the dead one's reservation and files, then stores the content for real.
        record, created = store.publish(source, "tiny")
    assert created and record.version == "3"  # 2 is never reused: it may have been seen half-written
    assert pending_rows(champion_store) == 0 and not folder.exists()


def test_a_publish_killed_after_commit_is_whole(champion_store, artifact_factory):
    kill_when_paused(
        start("publish", str(artifact_factory(2.0)), "--tag", "champion", "--store", str(champion_store), pause_at="committed"),
        "committed",
    )
    with ModelStore.open(champion_store) as store:
        assert store.verify(Ref("tiny", tag="champion")).version == "2"


def test_a_gc_killed_between_records_and_files_finishes_next_time(champion_store, artifact_factory):
    with ModelStore.open(champion_store) as store:
        store.publish(artifact_factory(2.0), "tiny")
        store.promote("champion", Ref("tiny", number=2))
        store.publish(artifact_factory(3.0), "tiny")
        store.publish(artifact_factory(4.0), "tiny")
    kill_when_paused(
        start("gc", "--keep", "1", "--store", str(champion_store), pause_at="gc-records-deleted"), "gc-records-deleted"
    )
    folder = champion_store / "artifacts" / "tiny" / "3"
    assert folder.exists()  # records went first; the files are left for the next gc
    assert [r["ref"] for r in versions_json("list", "--store", str(champion_store))] == ["tiny:4", "tiny:2", "tiny:1"]
    result = versions_json("gc", "--keep", "1", "--store", str(champion_store))
    assert result["removed_folders"] == ["tiny/3"] and not folder.exists()


def test_a_publisher_waits_for_a_live_twin_and_takes_over_from_a_dead_one(champion_store, artifact_factory):
    source = artifact_factory(2.0)
    first = start("publish", str(source), "--store", str(champion_store), pause_at="copied")
    assert first.stderr.readline().strip() == "paused at copied"
    second = start("publish", str(source), "--store", str(champion_store), "--json")
    time.sleep(1.0)
    assert second.poll() is None  # the same content is on its way: it waits rather than storing it twice
    first.send_signal(signal.SIGKILL)
    first.wait()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    with ModelStore.open(champion_store) as store:
        assert [r.version for r in store.list()] == ["3", "1"] and store.verify(Ref("tiny", number=3))
    assert pending_rows(champion_store) == 0


def test_several_processes_publishing_at_once(store_dir, artifact_factory, tmp_path):
    distinct = [artifact_factory(float(i)) for i in range(1, 5)]
    same_elsewhere = tmp_path / "copy-of-first"
    shutil.copytree(distinct[0], same_elsewhere)  # equal content at another path: content, not path, decides
    sources = [*distinct, distinct[0], same_elsewhere]
    processes = [start("publish", str(s), "--tag", "champion", "--store", str(store_dir), "--json") for s in sources]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    with ModelStore.open(store_dir) as store:
        records = store.list("tiny")
        # Four distinct contents: versions 1..4 with no gap; the three publishes of equal content share one.
        assert sorted(int(r.version) for r in records) == [1, 2, 3, 4]
        assert len({r.digest for r in records}) == 4
        assert results[0]["version"] == results[4]["version"] == results[5]["version"]
        assert [r["created"] for r in (results[0], results[4], results[5])].count(True) == 1
        for record in records:
            store.verify(Ref("tiny", number=int(record.version)))
        # Every tag move was serialised: each one starts where the one before it ended.
        history = store.tag_history("tiny", "champion")
        assert all(later.previous == earlier.version for earlier, later in zip(history, history[1:]))
        assert store.get(Ref("tiny", tag="champion")).version == history[-1].version
    assert pending_rows(store_dir) == 0
