"""The SQLite file under the run store: its schema, migrations and connections, and what a
broken file means to the user.

Every process (kernel, supervisor, CLI, Jupyter server) opens its own short connection: WAL
mode lets readers go on while a writer commits, and a busy timeout plus ``BEGIN IMMEDIATE``
makes concurrent writers queue instead of failing with "database is locked". A file that is
corrupt, deleted under a running process, or on a full disk becomes ``StoreUnusable``: one line
saying what is wrong and what to do, never a traceback from sqlite3.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

SCHEMA_VERSION = 3
MIGRATIONS = {  # to version: from the one before
    2: "ALTER TABLE runs ADD COLUMN stop_grace REAL",
    3: "ALTER TABLE runs ADD COLUMN scheduler_id TEXT; ALTER TABLE runs ADD COLUMN queue_reason TEXT; "
       "ALTER TABLE runs ADD COLUMN polled REAL",
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    nproc INTEGER NOT NULL DEFAULT 1,
    nnodes INTEGER NOT NULL DEFAULT 1,
    notebook TEXT,
    cwd TEXT,
    host TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT 'local',
    params TEXT NOT NULL DEFAULT '{}',
    pid INTEGER,
    pid_started REAL,
    pgid INTEGER,
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    exit_code INTEGER,
    error TEXT,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    stop_grace REAL,
    scheduler_id TEXT,
    queue_reason TEXT,
    polled REAL
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
"""
REPAIR_HINT = "`jiyu doctor --store` checks it; `jiyu store repair` rebuilds it from the run folders"
_ready: set[Path] = set()  # files this process has already created or migrated


class StoreUnusable(RuntimeError):
    """The run store cannot be read or written. ``str()`` is one line with what to do; IPython
    shows just that line (no sqlite3 frames) wherever it surfaces."""

    def _render_traceback_(self) -> list[str]:
        return [f"StoreUnusable: {self}"]


def explain(path: Path, error: sqlite3.Error) -> StoreUnusable:
    text = str(error)
    if "full" in text:
        return StoreUnusable(f"the disk holding the run store {path} is full ({text}): free some space")
    if "disk I/O" in text or "unable to open" in text or "readonly" in text:
        return StoreUnusable(f"the run store {path} cannot be written ({text}): check the disk and the "
                             "folder's permissions")
    return StoreUnusable(f"the run store {path} is unusable ({text}); {REPAIR_HINT}")


class StoreDatabase:
    def __init__(self, path: Path):
        self.path = path
        if self.path not in _ready or not self.path.exists():
            self.create_or_migrate()
            _ready.add(self.path)

    def create_or_migrate(self) -> None:
        """Once per process and file: a store opened every second (``%job attach``, the
        server) must not take the write lock each time."""
        with self.read() as db:
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
        with self.write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            exists = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone()
            if exists:
                for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[target].split(";"):
                        db.execute(statement)
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout = 30000")
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            db = self._connect()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                db.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            db = self._connect()
            try:
                yield db
            finally:
                db.close()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """sqlite3's errors as ``StoreUnusable``. A store deleted under a long-running process
        (the Jupyter server) comes back empty rather than failing every request."""
        try:
            yield
        except sqlite3.OperationalError as error:
            if "no such table" in str(error) and self.path in _ready:
                _ready.discard(self.path)
                raise StoreUnusable(f"the run store {self.path} was deleted while in use; it starts empty "
                                    f"now ({REPAIR_HINT})") from None
            raise explain(self.path, error) from None
        except sqlite3.DatabaseError as error:
            raise explain(self.path, error) from None
