"""The store's SQLite database: schema, connections and transactions.

SQLite is the embedded default: one file, transactions, and a lock that lets several
publishers work at once (WAL mode, `BEGIN IMMEDIATE` for every write, a busy timeout).
Rules that must never break are enforced by the database itself, not only by the code
above it: published versions are immutable, a tag can only point at a published version
of its own model (and that version cannot be deleted while it does), and the tag history
is append-only. A deleted version's folder is listed in `trash` in the same transaction
that deletes its record, so files are only ever removed once no record can point at them,
and a crash between the two leaves a note of what is left to remove (never a guess).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

DB_FILE = "store.db"
SCHEMA_VERSION = "1"
BUSY_TIMEOUT_S = 60.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    name TEXT PRIMARY KEY,
    next_number INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL REFERENCES models(name),
    number INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'ready')),
    source_digest TEXT NOT NULL,
    digest TEXT,
    path TEXT NOT NULL UNIQUE,
    size_bytes INTEGER,
    created_at TEXT NOT NULL,
    created_by TEXT NOT NULL,
    owner_host TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    lineage TEXT NOT NULL DEFAULT '{}',
    metrics TEXT NOT NULL DEFAULT '{}',
    UNIQUE (model, number),
    CHECK (state = 'pending' OR digest IS NOT NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS versions_by_content ON versions (model, source_digest) WHERE state = 'ready';
CREATE TABLE IF NOT EXISTS tags (
    model TEXT NOT NULL,
    tag TEXT NOT NULL,
    version_id INTEGER NOT NULL REFERENCES versions(id) ON DELETE RESTRICT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (model, tag)
);
CREATE TABLE IF NOT EXISTS trash (
    path TEXT PRIMARY KEY,
    since TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tag_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model TEXT NOT NULL,
    tag TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('promote', 'rollback')),
    number INTEGER NOT NULL,
    previous INTEGER,
    at TEXT NOT NULL,
    by TEXT NOT NULL
);
CREATE TRIGGER IF NOT EXISTS versions_immutable BEFORE UPDATE ON versions WHEN OLD.state = 'ready'
BEGIN SELECT RAISE(ABORT, 'published versions are immutable'); END;
CREATE TRIGGER IF NOT EXISTS tag_events_no_update BEFORE UPDATE ON tag_events
BEGIN SELECT RAISE(ABORT, 'the tag history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS tag_events_no_delete BEFORE DELETE ON tag_events
BEGIN SELECT RAISE(ABORT, 'the tag history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS tags_point_at_published_insert BEFORE INSERT ON tags
WHEN NOT EXISTS (SELECT 1 FROM versions WHERE id = NEW.version_id AND model = NEW.model AND state = 'ready')
BEGIN SELECT RAISE(ABORT, 'a tag must point at a published version of its own model'); END;
CREATE TRIGGER IF NOT EXISTS tags_point_at_published_update BEFORE UPDATE ON tags
WHEN NOT EXISTS (SELECT 1 FROM versions WHERE id = NEW.version_id AND model = NEW.model AND state = 'ready')
BEGIN SELECT RAISE(ABORT, 'a tag must point at a published version of its own model'); END;
"""


class StoreError(Exception):
    """The store is missing, unreadable or refuses an operation; the message says what to do."""


def connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """Open the database (creating it and its schema only when `create`), in autocommit mode.

    Transactions are explicit (`write`, `read`), so each one is exactly as wide as intended.
    """
    path = Path(path)
    if not create and not path.is_file():
        raise StoreError(
            f"no model store at {path.parent} (no {DB_FILE}): publish a version first "
            "(`python -m export versions publish ARTIFACT_DIR`) or pass --store"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StoreError(f"cannot create the model store at {path.parent}: {err.strerror}") from err
    mode = "rwc" if create else "rw"
    try:
        conn = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        if create:
            with write(conn):
                for statement in _statements(SCHEMA):
                    conn.execute(statement)
                conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
        _check_schema(conn, path)
    except sqlite3.DatabaseError as err:
        raise describe_error(err, path) from err
    return conn


def _statements(script: str) -> list[str]:
    """Split the schema into statements (triggers contain ';' and end with 'END;')."""
    statements, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current)
        if sqlite3.complete_statement(text):
            statements.append(text)
            current = []
    return statements


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.OperationalError as err:
        raise StoreError(f"{path} is not a Slipway model store ({err}); point --store at a store folder") from err
    if row is None or row["value"] != SCHEMA_VERSION:
        found = row["value"] if row else "none"
        raise StoreError(f"{path} has store schema {found}, this Slipway reads schema {SCHEMA_VERSION}")


def describe_error(err: sqlite3.DatabaseError, path: Path) -> StoreError:
    """One line for any database failure: busy, corrupt or not a database at all."""
    text = str(err)
    if "locked" in text or "busy" in text:
        return StoreError(f"the model store {path} stayed locked for over {BUSY_TIMEOUT_S:.0f} s by another process; try again")
    if isinstance(err, sqlite3.IntegrityError) or "immutable" in text or "append-only" in text or "a tag must" in text:
        return StoreError(f"the model store refused the change: {text}")
    return StoreError(f"the model store database {path} is unreadable ({text}); restore it from a backup or use another --store")


@contextlib.contextmanager
def write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction holding the database's write lock from its start (no upgrade deadlocks)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def read(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One consistent snapshot for a group of queries."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
