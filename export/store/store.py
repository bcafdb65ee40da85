"""`ModelStore`: publish, look up, tag, roll back and garbage-collect model versions.

A publish takes three steps, and only the last one makes anything visible:
1. reserve: in one transaction, take the model's next version number and record a
   *pending* version owned by this process (pending versions are invisible);
2. copy: write the artifact folder to `<artifact root>/<model>/<number>/`, hashing every
   file on the way; the stored `model-settings.json` names the model and carries
   `parameters.version`, so MLServer answers `/v2/models/<name>/versions/<number>/infer`;
3. commit: in one transaction, mark the version ready (and move `--tag`).
A publisher killed between these steps leaves a pending record and perhaps some files:
never visible, reclaimed by the next publish or `gc` once its owner is gone. Records are
deleted before files, and the folders of deleted records are listed in the `trash` table
until they are gone: files are only removed when the store knows no record needs them.

Version numbers are never reused, so `digits:3` names the same bytes for ever. Content
addressing uses the published folder's manifest digest (`source_digest`): publishing the
same content again returns the existing version. The stored copy differs from the source
only in `model-settings.json` (name and version), so it has its own `digest`, which is
what MLServer verifies at load and what a deployment pins.
"""

from __future__ import annotations

import builtins  # ModelStore.list shadows the builtin inside the class
import calendar
import json
import os
import socket
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from pydantic import ValidationError

from export.store import db
from export.store.blobs import ArtifactRoot, ProgressHook
from export.store.db import StoreError
from export.store.lineage import Lineage, now, who
from export.store.records import GcResult, TagMove, VersionRecord
from export.store.refs import Ref, check_name
from slipway.artifact import SETTINGS_FILE, ArtifactError, Manifest, verify_artifact
from slipway.cli import one_line
from slipway.files import FileProblem, read_json
from slipway.paths import MODEL_STORE_DIR

ARTIFACTS_DIR = "artifacts"
PAUSE_ENV = "SLIPWAY_STORE_PAUSE_AT"  # crash tests: pause a publish or gc at a named stage
STALE_AFTER_S = 3600.0  # a pending version from another host is abandoned after this long
WAIT_FOR_TWIN_S = 600.0  # how long a publish waits for another publishing the same content
POLL_S = 0.2


def pause_point(stage: str) -> None:
    """Block here for ever when $SLIPWAY_STORE_PAUSE_AT names this stage (so a test can SIGKILL us here)."""
    if os.environ.get(PAUSE_ENV) == stage:
        print(f"paused at {stage}", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)


def _owner_alive(host: str, pid: int, created_at: str) -> bool:
    """Is the publisher of a pending version still at work? Same host: its PID; elsewhere: its age."""
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    started = calendar.timegm(time.strptime(created_at, "%Y-%m-%dT%H:%M:%SZ"))
    return time.time() - started < STALE_AFTER_S


def verified_manifest(artifact_dir: Path) -> Manifest:
    """The manifest of the folder to publish, every file checked against it (`check_publish` ran first)."""
    try:
        manifest = verify_artifact(artifact_dir)
    except ArtifactError as err:
        raise StoreError(f"cannot publish: {err}") from err
    if SETTINGS_FILE not in manifest.files:
        raise StoreError(f"cannot publish {artifact_dir}: it has no {SETTINGS_FILE}, so MLServer could not serve it")
    return manifest


def _read_settings(artifact_dir: Path) -> dict:
    path = artifact_dir / SETTINGS_FILE
    if not path.is_file():
        raise StoreError(f"cannot publish {artifact_dir}: it has no {SETTINGS_FILE}, so MLServer could not serve it")
    fix = "re-export the artifact with `python -m export convert`, or fix the file"
    try:
        settings = read_json(path)
    except FileProblem as err:
        raise StoreError(f"cannot publish: {err}; {fix}") from err
    if not isinstance(settings, dict):
        raise StoreError(f"cannot publish: {path} is not a JSON object; {fix}")
    return settings


def check_publish(artifact_dir: Path, model: str | None = None, tag: str | None = None) -> tuple[str, dict]:
    """What a publish refuses on sight (a bad tag, unreadable settings, a missing or bad model name),
    checked without hashing the files, so a store is not created for a publish that cannot happen.
    Returns the model name and the folder's model settings."""
    if tag is not None:
        check_name(tag, "tag")
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise StoreError(f"{artifact_dir} is not a folder: pass an artifact folder written by `python -m export convert`")
    settings = _read_settings(artifact_dir)
    model = model or settings.get("name")
    if not isinstance(model, str):
        raise StoreError(f"{artifact_dir / SETTINGS_FILE} names no model: pass --model NAME")
    check_name(model, "model name")
    return model, settings


def stored_settings(settings: dict, model: str, number: int) -> bytes:
    """The source's model-settings.json, renamed to the model and carrying its version number."""
    stored = json.loads(json.dumps(settings))
    stored["name"] = model
    parameters = stored.get("parameters") if isinstance(stored.get("parameters"), dict) else {}
    parameters["version"] = str(number)
    stored["parameters"] = parameters
    return (json.dumps(stored, indent=2) + "\n").encode()


class ModelStore:
    """A store folder: `store.db` (SQLite) and, by default, `artifacts/` beside it."""

    def __init__(self, conn: sqlite3.Connection, db_path: Path, artifacts: ArtifactRoot):
        self._conn = conn
        self.db_path = db_path
        self.artifacts = artifacts

    @classmethod
    def open(cls, store: str | Path = MODEL_STORE_DIR, *, create: bool = False, artifact_root: str | None = None) -> ModelStore:
        """Open the store at a local folder (or file:// URL); `create` makes it on first publish.

        The database must be on a local disk (SQLite); artifacts may live at any fsspec URL,
        chosen with `artifact_root` when the store is created and remembered in it.
        """
        try:
            fs, path = url_to_fs(str(store))
        except (ImportError, ValueError):  # s3://, gs://... without their driver, or a protocol fsspec does not know
            fs, path = None, str(store)
        if not isinstance(fs, LocalFileSystem):
            raise StoreError(
                f"--store {store} is not a local folder: the store's SQLite database needs a local disk. "
                "Keep --store local and put the artifacts in the cloud with --artifact-root s3://... on the first publish "
                "(that needs the `cloud` extra: pip install 'slipway[cloud]')"
            )
        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise StoreError(f"--store {store} is a file, not a store folder")
        if create and artifact_root:
            ArtifactRoot(artifact_root)  # an unusable URL (no driver installed) is refused before it is remembered
        db_path = folder / db.DB_FILE
        conn = db.connect(db_path, create=create)
        try:
            root = cls._artifact_root(conn, folder, artifact_root if create else None)
        except sqlite3.DatabaseError as err:
            conn.close()
            raise db.describe_error(err, db_path) from err
        return cls(conn, db_path, ArtifactRoot(root))

    @staticmethod
    def _artifact_root(conn: sqlite3.Connection, folder: Path, wanted: str | None) -> str:
        default = str(folder / ARTIFACTS_DIR)  # kept relative to the store: a moved store still finds its files
        with db.write(conn) if wanted else db.read(conn):
            row = conn.execute("SELECT value FROM meta WHERE key = 'artifact_root'").fetchone()
            root = row["value"] if row else default
            if wanted and row is None and conn.execute("SELECT COUNT(*) FROM versions").fetchone()[0] == 0:
                conn.execute("INSERT INTO meta (key, value) VALUES ('artifact_root', ?)", (wanted,))
                return wanted
        if wanted and wanted != root:
            raise StoreError(f"this store keeps its artifacts at {root}, not {wanted}; drop --artifact-root")
        return root

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ModelStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """A write (or read) transaction whose database failures become one-line `StoreError`s."""
        try:
            with (db.write if write else db.read)(self._conn) as conn:
                yield conn
        except sqlite3.DatabaseError as err:
            raise db.describe_error(err, self.db_path) from err

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._transaction(write=True)

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._transaction(write=False)

    # -- publish ---------------------------------------------------------------------------

    def publish(
        self,
        artifact_dir: Path,
        model: str | None = None,
        *,
        lineage: Lineage | None = None,
        tag: str | None = None,
        on_bytes: ProgressHook | None = None,
    ) -> tuple[VersionRecord, bool]:
        """Publish a folder as the model's next version; (record, True) if new, (existing, False) if known.

        The model name defaults to the one in the folder's model-settings.json.
        """
        model, settings = check_publish(artifact_dir, model, tag)
        source_manifest = verified_manifest(Path(artifact_dir))
        lineage = lineage or Lineage()
        pause_point("verified")
        reservation = self._reserve(model, source_manifest.digest)
        if isinstance(reservation, VersionRecord):
            return self._tag_existing(reservation, tag), False
        version_id, number, relative = reservation
        pause_point("reserved")
        try:
            stored_manifest = self.artifacts.write_version(
                Path(artifact_dir),
                relative,
                source_manifest,
                {SETTINGS_FILE: stored_settings(settings, model, number)},
                on_bytes=on_bytes,
                after_first_file=lambda: pause_point("copying"),
            )
            pause_point("copied")
            existing = self._commit(version_id, model, stored_manifest, lineage, tag)
        except BaseException:
            self._abandon(version_id, relative)
            raise
        if existing is not None:
            self._abandon(version_id, relative)
            return self._tag_existing(existing, tag), False
        pause_point("committed")
        return self.get(Ref(model, number=number)), True

    def _reserve(self, model: str, source_digest: str) -> VersionRecord | tuple[int, int, str]:
        """Take the next number (or return the version already holding this content)."""
        deadline = time.monotonic() + WAIT_FOR_TWIN_S
        while True:
            with self._write() as conn:
                reclaimed = self._reclaim_abandoned(conn)
                existing = conn.execute(
                    "SELECT number FROM versions WHERE model = ? AND source_digest = ? AND state = 'ready'",
                    (model, source_digest),
                ).fetchone()
                twin = conn.execute(
                    "SELECT id FROM versions WHERE model = ? AND source_digest = ? AND state = 'pending'",
                    (model, source_digest),
                ).fetchone()
                if existing is None and twin is None:
                    reservation = self._insert_pending(conn, model, source_digest)
            self._empty_trash(reclaimed)
            if existing is not None:
                return self.get(Ref(model, number=existing["number"]))
            if twin is None:
                return reservation
            if time.monotonic() > deadline:
                raise StoreError(
                    f"another process has been publishing the same content as {model} for over "
                    f"{WAIT_FOR_TWIN_S:.0f} s; try again later"
                )
            time.sleep(POLL_S)  # another live publisher is storing the very same content: wait for its version

    def _insert_pending(self, conn: sqlite3.Connection, model: str, source_digest: str) -> tuple[int, int, str]:
        stamp = now()
        conn.execute("INSERT OR IGNORE INTO models (name, next_number, created_at) VALUES (?, 1, ?)", (model, stamp))
        number = conn.execute("SELECT next_number FROM models WHERE name = ?", (model,)).fetchone()[0]
        conn.execute("UPDATE models SET next_number = ? WHERE name = ?", (number + 1, model))
        relative = f"{model}/{number}"
        if self.artifacts.exists(relative):
            raise StoreError(
                f"{self.artifacts.uri(relative)} already exists but this store has no record of it "
                "(was store.db replaced?): move that folder away and publish again"
            )
        cursor = conn.execute(
            "INSERT INTO versions (model, number, state, source_digest, path, created_at, created_by, owner_host, owner_pid)"
            " VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
            (model, number, source_digest, relative, stamp, who(), socket.gethostname(), os.getpid()),
        )
        if cursor.lastrowid is None:  # sqlite3 sets it for every INSERT that adds a row
            raise StoreError(f"the store did not number the new row for {model} version {number}")
        return cursor.lastrowid, number, relative

    def _commit(self, version_id: int, model: str, manifest: Manifest, lineage: Lineage, tag: str | None) -> VersionRecord | None:
        """Make the pending version visible, with its tag, in one transaction; or return an equal version that won."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT number, source_digest FROM versions WHERE id = ? AND state = 'pending'", (version_id,)
            ).fetchone()
            if row is None:
                raise StoreError("this publish took so long that its reservation was reclaimed as abandoned; publish again")
            twin = conn.execute(
                "SELECT number FROM versions WHERE model = ? AND source_digest = ? AND state = 'ready'",
                (model, row["source_digest"]),
            ).fetchone()
            if twin is None:
                size = sum(entry.bytes for entry in manifest.files.values())
                conn.execute(
                    "UPDATE versions SET state = 'ready', digest = ?, size_bytes = ?, lineage = ?, metrics = ?,"
                    " created_at = ? WHERE id = ?",
                    (
                        manifest.digest,
                        size,
                        json.dumps(lineage.lineage, sort_keys=True),
                        json.dumps(lineage.metrics, sort_keys=True),
                        now(),
                        version_id,
                    ),
                )
                if tag is not None:
                    self._move_tag(conn, model, tag, row["number"], "promote")
                return None
        return self.get(Ref(model, number=twin["number"]))

    def _tag_existing(self, record: VersionRecord, tag: str | None) -> VersionRecord:
        if tag is None or tag in record.tags:
            return record
        self.promote(tag, Ref(record.name, number=int(record.version)))
        return self.get(Ref(record.name, number=int(record.version)))

    def _abandon(self, version_id: int, relative: str) -> None:
        """Undo a failed publish: delete its pending record first, then its files."""
        try:
            with self._write() as conn:
                rows = conn.execute("SELECT id, path FROM versions WHERE id = ? AND state = 'pending'", (version_id,)).fetchall()
                self._retire(conn, rows)
        except StoreError:
            return  # the record stays pending; a later publish or gc reclaims it and its files
        self._empty_trash([relative])

    def _reclaim_abandoned(self, conn: sqlite3.Connection) -> list[str]:
        """Retire pending versions whose publisher died; return their folders (removed after the commit)."""
        rows = conn.execute("SELECT id, path, owner_host, owner_pid, created_at FROM versions WHERE state = 'pending'").fetchall()
        return self._retire(
            conn, [row for row in rows if not _owner_alive(row["owner_host"], row["owner_pid"], row["created_at"])]
        )

    @staticmethod
    def _retire(conn: sqlite3.Connection, rows: list[sqlite3.Row]) -> list[str]:
        """Delete version records and list their folders in the trash, in the caller's transaction."""
        stamp = now()
        for row in rows:
            conn.execute("DELETE FROM versions WHERE id = ?", (row["id"],))
            conn.execute("INSERT OR IGNORE INTO trash (path, since) VALUES (?, ?)", (row["path"], stamp))
        return [row["path"] for row in rows]

    def _empty_trash(self, folders: list[str]) -> None:
        """Remove the folders of retired records, then their trash entries (a crash in between is repeated safely)."""
        for relative in folders:
            self.artifacts.remove(relative)
        if folders:
            with self._write() as conn:
                conn.executemany("DELETE FROM trash WHERE path = ?", [(f,) for f in folders])

    # -- reading ---------------------------------------------------------------------------

    def _record(self, conn: sqlite3.Connection, row: sqlite3.Row) -> VersionRecord:
        tags = [t["tag"] for t in conn.execute("SELECT tag FROM tags WHERE version_id = ? ORDER BY tag", (row["id"],))]
        return VersionRecord(
            name=row["model"],
            version=str(row["number"]),
            ref=f"{row['model']}:{row['number']}",
            uri=self.artifacts.uri(row["path"]),
            digest=row["digest"],
            source_digest=row["source_digest"],
            tags=tags,
            size_bytes=row["size_bytes"],
            created_at=row["created_at"],
            created_by=row["created_by"],
            metrics=json.loads(row["metrics"]),
            lineage=json.loads(row["lineage"]),
        )

    def _find(self, conn: sqlite3.Connection, ref: Ref) -> sqlite3.Row:
        if ref.tag is not None:
            row = conn.execute(
                "SELECT v.* FROM tags t JOIN versions v ON v.id = t.version_id WHERE t.model = ? AND t.tag = ?",
                (ref.model, ref.tag),
            ).fetchone()
        elif ref.number is not None:
            row = conn.execute(
                "SELECT * FROM versions WHERE model = ? AND number = ? AND state = 'ready'", (ref.model, ref.number)
            ).fetchone()
        else:
            row = conn.execute(
                "SELECT * FROM versions WHERE model = ? AND state = 'ready' ORDER BY number DESC LIMIT 1", (ref.model,)
            ).fetchone()
        if row is None:
            raise StoreError(self._not_found(conn, ref))
        return row

    def _not_found(self, conn: sqlite3.Connection, ref: Ref) -> str:
        numbers = [
            r[0]
            for r in conn.execute("SELECT number FROM versions WHERE model = ? AND state = 'ready' ORDER BY number", (ref.model,))
        ]
        if not numbers:
            models = [r[0] for r in conn.execute("SELECT DISTINCT model FROM versions WHERE state = 'ready' ORDER BY model")]
            return f"no model {ref.model!r} in the store (models: {', '.join(models) or 'none yet'})"
        if ref.tag is not None:
            tags = [r[0] for r in conn.execute("SELECT tag FROM tags WHERE model = ? ORDER BY tag", (ref.model,))]
            return f"model {ref.model!r} has no tag {ref.tag!r} (tags: {', '.join(tags) or 'none'}); tag a version with `promote`"
        return f"model {ref.model!r} has no version {ref.number} (versions: {', '.join(map(str, numbers))})"

    def get(self, ref: Ref) -> VersionRecord:
        """One version by number, tag or `latest`."""
        with self._read() as conn:
            return self._record(conn, self._find(conn, ref))

    def list(self, model: str | None = None) -> list[VersionRecord]:
        """Every published version (of one model), newest first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM versions WHERE state = 'ready' AND (? IS NULL OR model = ?) ORDER BY model, number DESC",
                (model, model),
            ).fetchall()
            if model is not None and not rows:
                raise StoreError(self._not_found(conn, Ref(model)))
            return [self._record(conn, row) for row in rows]

    def tag_history(self, model: str, tag: str) -> builtins.list[TagMove]:
        """Every move of a tag, oldest first (the append-only log); an unknown model or tag is refused, as by `rollback`."""
        with self._read() as conn:
            events = self._events(conn, model, tag)
            if not events:
                raise StoreError(self._not_found(conn, Ref(model, tag=tag)))
            return [_move(row) for row in events]

    def models(self) -> builtins.list[str]:
        """Every model holding a published version, by name."""
        with self._read() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT model FROM versions WHERE state = 'ready' ORDER BY model")]

    def models_with_tag(self, tag: str) -> builtins.list[str]:
        with self._read() as conn:
            return [r[0] for r in conn.execute("SELECT model FROM tags WHERE tag = ? ORDER BY model", (tag,))]

    @staticmethod
    def _events(conn: sqlite3.Connection, model: str, tag: str) -> builtins.list[sqlite3.Row]:
        return conn.execute("SELECT * FROM tag_events WHERE model = ? AND tag = ? ORDER BY id", (model, tag)).fetchall()

    # -- tags ------------------------------------------------------------------------------

    def _move_tag(self, conn: sqlite3.Connection, model: str, tag: str, number: int, action: str) -> TagMove:
        current = conn.execute(
            "SELECT v.number FROM tags t JOIN versions v ON v.id = t.version_id WHERE t.model = ? AND t.tag = ?",
            (model, tag),
        ).fetchone()
        previous = current["number"] if current else None
        stamp, by = now(), who()
        if previous == number:
            return TagMove(
                model=model, tag=tag, action=action, version=str(number), previous=str(previous), at=stamp, by=by, changed=False
            )
        version_id = conn.execute(
            "SELECT id FROM versions WHERE model = ? AND number = ? AND state = 'ready'", (model, number)
        ).fetchone()["id"]
        conn.execute(
            "INSERT INTO tags (model, tag, version_id, updated_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (model, tag) DO UPDATE SET version_id = excluded.version_id, updated_at = excluded.updated_at",
            (model, tag, version_id, stamp),
        )
        conn.execute(
            "INSERT INTO tag_events (model, tag, action, number, previous, at, by) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (model, tag, action, number, previous, stamp, by),
        )
        return TagMove(
            model=model,
            tag=tag,
            action=action,
            version=str(number),
            previous=None if previous is None else str(previous),
            at=stamp,
            by=by,
        )

    def promote(self, tag: str, ref: Ref) -> TagMove:
        """Point `tag` at the version `ref` names, recording the move."""
        check_name(tag, "tag")
        with self._write() as conn:
            row = self._find(conn, ref)
            return self._move_tag(conn, row["model"], tag, row["number"], "promote")

    def rollback(self, model: str, tag: str) -> TagMove:
        """Move `tag` back to the version it pointed at before its current one."""
        with self._write() as conn:
            target = self._rollback_target(conn, model, tag)
            if target is None:
                current = self._find(conn, Ref(model, tag=tag))
                raise StoreError(
                    f"{model}@{tag} points at version {current['number']} and has no earlier version to roll back to "
                    f"(see its moves with `versions history {model}@{tag}`)"
                )
            return self._move_tag(conn, model, tag, target, "rollback")

    def _rollback_target(self, conn: sqlite3.Connection, model: str, tag: str) -> int | None:
        """Replay the tag's history as a stack (promote pushes, rollback pops) and take the entry below the top.

        Versions deleted since are skipped, so a rollback always lands on a version that exists.
        """
        self._find(conn, Ref(model, tag=tag))  # a clear error when the tag does not exist
        stack: builtins.list[int] = []
        for event in self._events(conn, model, tag):
            if event["action"] == "promote":
                stack.append(event["number"])
            else:
                while stack and stack[-1] != event["number"]:
                    stack.pop()
                if not stack:
                    stack.append(event["number"])
        existing = {r[0] for r in conn.execute("SELECT number FROM versions WHERE model = ? AND state = 'ready'", (model,))}
        current = stack[-1] if stack else None
        for number in reversed(stack[:-1]):
            if number in existing and number != current:
                return number
        return None

    # -- garbage collection --------------------------------------------------------------------

    def gc(self, keep: int, *, model: str | None = None, dry_run: bool = False) -> GcResult:
        """Delete versions beyond each model's newest `keep` (records, then files), never one a tag needs.

        A tag needs the version it points at and the one `rollback` would move it to. Pending
        versions of dead publishers, and folders left in the trash by an interrupted delete,
        are removed too. Folders the store has no note of are reported, never deleted.
        """
        if keep < 0:
            raise StoreError(f"--keep must be 0 or more, got {keep}")
        result = GcResult(dry_run=dry_run)
        folders = self.artifacts.version_folders()
        with self._read() if dry_run else self._write() as conn:
            models = [
                r[0] for r in conn.execute("SELECT name FROM models WHERE ? IS NULL OR name = ? ORDER BY name", (model, model))
            ]
            if model is not None and not models:
                raise StoreError(self._not_found(conn, Ref(model)))
            doomed: builtins.list[sqlite3.Row] = []
            for name in models:
                needed = self._needed_by_tags(conn, name)
                rows = conn.execute(
                    "SELECT * FROM versions WHERE model = ? AND state = 'ready' ORDER BY number DESC", (name,)
                ).fetchall()
                for row in rows[keep:]:
                    if row["number"] in needed:
                        result.kept_for_tags[f"{name}:{row['number']}"] = needed[row["number"]]
                    else:
                        doomed.append(row)
            result.deleted = [f"{row['model']}:{row['number']}" for row in doomed]
            if not dry_run:
                self._reclaim_abandoned(conn)
                self._retire(conn, doomed)
            trash = sorted(r[0] for r in conn.execute("SELECT path FROM trash"))
            claimed = {r[0] for r in conn.execute("SELECT path FROM versions")}
        if dry_run:
            result.removed_folders = sorted({row["path"] for row in doomed} | (set(trash) & folders))
        else:
            pause_point("gc-records-deleted")
            self._empty_trash(trash)
            result.removed_folders = sorted(set(trash) & folders)
        result.unknown_folders = sorted(folders - claimed - set(trash))
        return result

    def _needed_by_tags(self, conn: sqlite3.Connection, model: str) -> dict[int, builtins.list[str]]:
        """{version number: tags needing it}: each tag's current version and its rollback target."""
        needed: dict[int, builtins.list[str]] = {}
        for row in conn.execute(
            "SELECT t.tag, v.number FROM tags t JOIN versions v ON v.id = t.version_id WHERE t.model = ? ORDER BY t.tag",
            (model,),
        ).fetchall():
            needed.setdefault(row["number"], []).append(row["tag"])
            target = self._rollback_target(conn, model, row["tag"])
            if target is not None:
                needed.setdefault(target, []).append(f"{row['tag']} (rollback)")
        return needed

    # -- integrity -------------------------------------------------------------------------------

    def verify(self, ref: Ref) -> VersionRecord:
        """Re-hash a stored version's files against its manifest and its recorded digest."""
        with self._read() as conn:
            row = self._find(conn, ref)
            record, relative = self._record(conn, row), row["path"]
        try:
            manifest = self.artifacts.read_manifest(relative)
            present = self.artifacts.file_names(relative)
        except ValidationError as err:
            raise StoreError(f"{record.ref} at {record.uri} has no readable manifest.json ({one_line(err, 'manifest')})") from err
        except (OSError, ValueError) as err:  # missing, a folder, not JSON, not UTF-8
            raise StoreError(f"{record.ref} at {record.uri} has no readable manifest.json ({err})") from err
        if manifest.digest != record.digest:
            raise StoreError(f"{record.ref}: the stored manifest's digest is not the one recorded at publish (it was replaced)")
        for name, entry in sorted(manifest.files.items()):
            if name not in present:
                raise StoreError(f"{record.ref} is incomplete: {name} is missing from {record.uri}")
            if self.artifacts.file_sha256(relative, name) != entry.sha256:
                raise StoreError(f"{record.ref} was modified: {name} does not match its sha256")
        unlisted = sorted(present - set(manifest.files) - {"manifest.json"})
        if unlisted:
            raise StoreError(f"{record.ref} holds files its manifest does not list: {', '.join(unlisted)}")
        return record


def _move(row: sqlite3.Row) -> TagMove:
    return TagMove(
        model=row["model"],
        tag=row["tag"],
        action=row["action"],
        version=str(row["number"]),
        previous=None if row["previous"] is None else str(row["previous"]),
        at=row["at"],
        by=row["by"],
    )
