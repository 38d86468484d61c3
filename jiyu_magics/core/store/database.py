"""The SQLite file under the run store: its schema, migrations and connections, and what a
broken file means to the user.

Every process (kernel, supervisor, CLI, Jupyter server) opens its own short connection: WAL
mode lets readers go on while a writer commits, and a busy timeout plus ``BEGIN IMMEDIATE``
makes concurrent writers queue instead of failing with "database is locked". A file that is
corrupt, deleted under a running process, or on a full disk becomes ``StoreUnusable``: one line
saying what is wrong and what to do, never a traceback from sqlite3.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..runs.files import PRIVATE_FILE
from ..runs.files import StoreUnusable as StoreUnusable  # the home folder's failure too: one type for both
from ..settings import HOME_ENV, Settings
from .lock_holder import describe_holder

SCHEMA_VERSION = 9
# to version: the statements that bring the one before to it (new tables come from SCHEMA's
# CREATE ... IF NOT EXISTS, run after every migration)
MIGRATIONS = {
    2: ("ALTER TABLE runs ADD COLUMN stop_grace REAL",),
    3: (
        "ALTER TABLE runs ADD COLUMN scheduler_id TEXT",
        "ALTER TABLE runs ADD COLUMN queue_reason TEXT",
        "ALTER TABLE runs ADD COLUMN polled REAL",
    ),
    4: (
        "ALTER TABLE runs ADD COLUMN gpus_requested INTEGER",
        "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE runs ADD COLUMN queue_rank REAL",
        "ALTER TABLE runs ADD COLUMN share INTEGER NOT NULL DEFAULT 0",
    ),
    # the progress summary, stored once when the run ends (listings read no event log)
    5: ("ALTER TABLE runs ADD COLUMN summary TEXT",),
    6: ("ALTER TABLE runs ADD COLUMN stalled_since REAL",),
    # the process that records the run's end (a kernel owning a ``%%train --nproc`` run whose
    # pid is torchrun's): the run is not lost while it lives
    7: ("ALTER TABLE runs ADD COLUMN owner_pid INTEGER", "ALTER TABLE runs ADD COLUMN owner_started REAL"),
    # each status change with its reason (``transitions.move``); the table comes from SCHEMA
    8: (),
    # a job another user's long-waiting run may preempt on a box (``core.box``)
    9: ("ALTER TABLE runs ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0",),
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
    polled REAL,
    gpus_requested INTEGER,
    priority INTEGER NOT NULL DEFAULT 0,
    queue_rank REAL,
    share INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    stalled_since REAL,
    owner_pid INTEGER,
    owner_started REAL,
    preemptible INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs(created);
CREATE TABLE IF NOT EXISTS gpu_leases (
    uuid TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    since REAL NOT NULL,
    ended REAL,
    shared INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS leases_by_run ON gpu_leases(run_id);
CREATE INDEX IF NOT EXISTS live_leases ON gpu_leases(uuid) WHERE ended IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS one_exclusive_lease ON gpu_leases(uuid) WHERE ended IS NULL AND shared = 0;
CREATE TABLE IF NOT EXISTS gpu_usage (
    hour REAL NOT NULL,
    uuid TEXT NOT NULL,
    owner TEXT NOT NULL,
    run_id TEXT,
    notebook TEXT,
    held_s REAL NOT NULL DEFAULT 0,
    idle_s REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, uuid, owner)
);
CREATE TABLE IF NOT EXISTS transitions (
    run_id TEXT NOT NULL,
    at REAL NOT NULL,
    from_status TEXT,
    to_status TEXT NOT NULL,
    reason TEXT NOT NULL,
    pid INTEGER
);
CREATE INDEX IF NOT EXISTS transitions_by_run ON transitions(run_id);
CREATE TABLE IF NOT EXISTS gpu_sampled (
    uuid TEXT PRIMARY KEY,
    at REAL NOT NULL
);
"""
# How long a writer waits for another process's write lock before saying the store is busy
# (a command gives up then; run owners keep retrying). JIYU_STORE_BUSY_S (core.settings) scales it down
# in tests and up on a slow shared disk.
DEFAULT_BUSY_S = 30.0
BUSY_NOTICE_S = 2.0  # a writer still waiting after this long says who it waits for (``busy_notice``)
REPAIR_HINT = "`jiyu doctor --store` checks it; `jiyu store repair` rebuilds it from the run folders"
_ready: set[Path] = set()  # files this process has already created or migrated
_wal: set[Path] = set()  # files this process has seen in WAL mode (it persists in the file)
# One idle connection per file, held for the life of the process. Closing the last connection
# to a WAL database checkpoints the log into the file (an fsync) and deletes it, and every
# short connection here would be the last one: 4-5 ms per operation, ~30 ms of each ``fit``
# call's registration and end. Held open, it keeps the log in place (SQLite still checkpoints
# every 1000 pages); it runs one read when opened and none after, so threads and forked
# children cannot misuse it.
_keepers: dict[Path, sqlite3.Connection] = {}


class StoreBusy(StoreUnusable):
    """Another process held the store's write lock for the whole busy timeout. The store is
    healthy: nothing to repair, only to wait for (run owners retry; a command says who holds
    it and exits)."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder  # "the store is busy: PID 4242 (python x.py) holds it"


# Told once per write that waits longer than ``BUSY_NOTICE_S`` (the CLI prints it to stderr),
# so a command that waits says why before it succeeds or gives up.
busy_notice: Callable[[str], None] | None = None


def busy_timeout() -> float:
    try:
        seconds = float(Settings.from_environ().store_busy_s or DEFAULT_BUSY_S)
    except ValueError:
        return DEFAULT_BUSY_S
    return seconds if 0 < seconds < float("inf") else DEFAULT_BUSY_S


def _is_busy(error: sqlite3.Error) -> bool:
    text = str(error)
    return "database is locked" in text or "database is busy" in text


def busy_line(path: Path) -> str:
    return f"the store is busy: {describe_holder(path)} holds it"


def read_only(folder: Path) -> bool:
    """Whether ``folder`` is on a file system mounted read-only (a root user's permission bits
    say nothing about that)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def read_only_store(path: Path) -> StoreUnusable:
    return StoreUnusable(
        f"the run store {path} is on a read-only file system: set {HOME_ENV} to a folder you can write"
    )


def explain(path: Path, error: sqlite3.Error | OSError) -> StoreUnusable:
    if read_only(path.parent):
        return read_only_store(path)
    text = str(error)
    if isinstance(error, OSError):
        return StoreUnusable(f"the run store {path} cannot be written ({error.strerror or error}): check the disk")
    if "full" in text:
        return StoreUnusable(f"the disk holding the run store {path} is full ({text}): free some space")
    if "disk I/O" in text or "unable to open" in text or "readonly" in text:
        return StoreUnusable(
            f"the run store {path} cannot be written ({text}): check the disk and the folder's permissions"
        )
    return StoreUnusable(f"the run store {path} is unusable ({text}); {REPAIR_HINT}")


def _keep_open(path: Path) -> None:
    if path not in _keepers:
        keeper = _keepers[path] = sqlite3.connect(path, check_same_thread=False)
        keeper.execute("SELECT count(*) FROM sqlite_master").fetchall()  # maps the WAL index: it counts as open


def _let_go(path: Path) -> None:
    """The file was replaced or deleted: the held connection belongs to the old one."""
    keeper = _keepers.pop(path, None)
    if keeper is not None:
        keeper.close()


def _drop_orphans(path: Path) -> None:
    """A store deleted while another process held it open leaves its ``-wal`` and ``-shm``
    behind; a new file must not start with them (SQLite reads them as its own: "disk I/O
    error"). Without the database file they belong to nothing."""
    for suffix in ("-wal", "-shm"):
        if not path.exists():
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _create_private(path: Path) -> None:
    """A new store is made empty (SQLite's new database) and readable by its user alone; SQLite
    gives its ``-wal`` and ``-shm`` files the same mode. An existing store keeps its own."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        pass


class StoreDatabase:
    def __init__(self, path: Path):
        self.path = path
        if self.path not in _ready or not self.path.exists():
            self.create_or_migrate()
            _ready.add(self.path)

    def create_or_migrate(self) -> None:
        """Once per process and file: a store opened every second (``%job attach``, the
        server) must not take the write lock each time."""
        _wal.discard(self.path)  # a new or replaced file: check its journal mode again
        _let_go(self.path)
        try:
            _drop_orphans(self.path)
            _create_private(self.path)
        except OSError as error:  # a read-only or failing disk: one line, as for sqlite3's errors
            raise explain(self.path, error) from None
        with self.read() as db:
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
        with self.write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            exists = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone()
            if exists:
                for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[target]:
                        db.execute(statement)
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def reopen(self) -> None:
        """The file again, as a new process would find it: a deleted store is made anew (empty),
        a replaced one migrated (a run owner that lost its store registers itself there again)."""
        self.create_or_migrate()
        _ready.add(self.path)

    def _connect(self, writing: bool = True) -> sqlite3.Connection:
        """A short connection; ``timeout`` is SQLite's busy timeout. Only a writer needs the
        synchronous setting, and WAL mode (kept in the file) is checked once per process:
        a panel poll opens a few of these."""
        db = sqlite3.connect(self.path, timeout=busy_timeout(), isolation_level=None)
        db.row_factory = sqlite3.Row
        if self.path not in _wal:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            _wal.add(self.path)
            _keep_open(self.path)
        if writing:
            db.execute("PRAGMA synchronous = NORMAL")
        return db

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            db = self._connect()
            try:
                self._begin(db)
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                db.close()

    def _begin(self, db: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting up to ``busy_timeout()`` for another writer; after
        ``BUSY_NOTICE_S`` of it (half of it, if that is shorter), ``busy_notice`` hears who
        holds the lock."""
        total = busy_timeout()
        deadline = time.monotonic() + total
        told = False
        while True:
            left = deadline - time.monotonic()
            wait = min(left, BUSY_NOTICE_S, total / 2) if busy_notice is not None and not told else left
            db.execute(f"PRAGMA busy_timeout = {max(int(wait * 1000), 1)}")
            try:
                db.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if not _is_busy(error) or time.monotonic() >= deadline - 0.01:
                    raise
            if busy_notice is not None and not told:
                busy_notice(f"{busy_line(self.path)}; waiting up to {total:.0f} s")
                told = True

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            db = self._connect(writing=False)
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
            if _is_busy(error):
                holder = busy_line(self.path)
                raise StoreBusy(
                    f"{holder} (its write lock, for over {busy_timeout():.0f} s); "
                    "the store is fine: try again once it lets go",
                    holder,
                ) from None
            if "no such table" in str(error) and self.path in _ready:
                _ready.discard(self.path)
                _wal.discard(self.path)
                _let_go(self.path)
                raise StoreUnusable(
                    f"the run store {self.path} was deleted while in use; it starts empty now ({REPAIR_HINT})"
                ) from None
            raise explain(self.path, error) from None
        except sqlite3.DatabaseError as error:
            raise explain(self.path, error) from None
