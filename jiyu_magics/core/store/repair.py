"""Checking the run store, and rebuilding it from the run folders when it is corrupt or gone.

Each run folder holds what the row said (``run.json``, written when the run was created and
when it ended) and its event log, so a store file lost to a crash, a full disk or a stray
``rm`` costs nothing: ``jiyu store repair`` sets the broken file aside and writes every run
back. Runs whose ``run.json`` is missing (folders from older versions) are rebuilt from their
event log and launch spec, as well as those can tell.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..events.fold import RunState
from ..events.log import read_events
from ..runs.files import jiyu_home, runs_root, store_path
from ..runs.model import RunKind, RunStatus
from .database import SCHEMA_VERSION, read_only, read_only_store
from .run_row import RECORD_FILE, Run
from .run_store import RunStore

LAUNCH_FILE = "launch.json"
# a restored run's history begins here (its earlier moves were in the store that was lost)
FROM_RECORD = "restored by `jiyu store repair` from its folder's run.json"
FROM_LOG = "rebuilt by `jiyu store repair` from its folder's event log and launch spec"


@dataclass
class StoreCheck:
    path: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    file_unusable: bool = False  # the file itself (missing, unreadable, failing integrity), not its folders

    @property
    def healthy(self) -> bool:
        return not self.problems


def check_store(home: Path | None = None) -> StoreCheck:
    """What `jiyu doctor --store` reports: the file's integrity and schema, and run folders the
    store does not know (what a repair would bring back)."""
    home = home or jiyu_home()
    check = StoreCheck(store_path(home))
    if read_only(home):
        check.problems.append(f"{home} is on a read-only file system: no run can be recorded there")
    if not check.path.exists():
        check.problems.append(f"{check.path} does not exist (deleted?)")
        check.file_unusable = True
        return _with_folders(check, home, known=set())
    try:
        db = sqlite3.connect(f"file:{check.path}?mode=ro", uri=True)
        try:
            verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            known = {row[0] for row in db.execute("SELECT id FROM runs")}
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        check.problems.append(f"{check.path} cannot be read: {error}")
        check.file_unusable = True
        return _with_folders(check, home, known=set())
    if verdict != "ok":
        check.problems.append(f"{check.path} fails SQLite's integrity check: {verdict}")
        check.file_unusable = True
    if version != SCHEMA_VERSION:
        check.notes.append(f"schema version {version}; this jiyu writes {SCHEMA_VERSION} (migrated on next use)")
    check.notes.append(f"{len(known)} run(s) recorded")
    return _with_folders(check, home, known)


def _with_folders(check: StoreCheck, home: Path, known: set[str]) -> StoreCheck:
    missing = [p.name for p in run_folders(home) if p.name not in known]
    if missing:
        check.problems.append(
            f"{len(missing)} run folder(s) have no row in the store "
            f"(e.g. {', '.join(missing[:3])}); `jiyu store repair` brings them back"
        )
    return check


def run_folders(home: Path | None = None) -> list[Path]:
    root = runs_root(home)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


@dataclass
class RepairReport:
    path: Path
    set_aside: Path | None
    restored: int
    from_records: int
    kept: int = 0  # rows a readable store already had, left as they are


def repair_store(home: Path | None = None) -> RepairReport:
    """Sets a broken store file aside (never deletes it) and rebuilds the runs from their folders.
    A readable store keeps the rows it has: they are newer than any folder's record (a running
    run's record is its row when it was created), so only folders without a row come back."""
    home = home or jiyu_home()
    path = store_path(home)
    if read_only(home):
        raise read_only_store(path)
    aside = _set_aside(path) if path.exists() and check_store(home).file_unusable else None
    store = RunStore(path)
    with store.db.read() as db:
        known = {row[0] for row in db.execute("SELECT id FROM runs")}
    missing = [folder for folder in run_folders(home) if folder.name not in known]
    records = {folder: _recorded_run(folder) for folder in missing}
    rebuilt = [_rebuilt_run(folder) for folder, run in records.items() if run is None]
    restored = store.restore([run for run in records.values() if run is not None], FROM_RECORD)
    restored += store.restore([run for run in rebuilt if run is not None], FROM_LOG)
    return RepairReport(path, aside, restored, sum((f / RECORD_FILE).exists() for f in missing), kept=len(known))


def _set_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.broken-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        companion = Path(f"{path}{suffix}")
        if companion.exists():
            companion.rename(f"{aside}{suffix}")
    return aside


def _recorded_run(folder: Path) -> Run | None:
    try:
        return Run.from_record(json.loads((folder / RECORD_FILE).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _rebuilt_run(folder: Path) -> Run | None:
    """The run a folder without a readable record holds, as its launch spec and its event log
    tell (folded: the last fit call says how the run ended, or that its end was never recorded)."""
    events, _ = read_events(folder / "events.jsonl")
    if not events and not (folder / LAUNCH_FILE).exists():
        return None
    state = RunState.of(events)
    created = events[0].get("t") if events else folder.stat().st_mtime
    kind = (
        RunKind.JOB if (folder / LAUNCH_FILE).exists() else (RunKind.DDP if (state.nproc or 1) > 1 else RunKind.KERNEL)
    )
    unended = None if state.end_status else "rebuilt from its folder by `jiyu store repair`: its end was never recorded"
    return Run(
        id=folder.name,
        name=state.name or folder.name,
        kind=kind,
        status=state.end_status or RunStatus.LOST,
        nproc=state.nproc or 1,
        host=socket.gethostname(),
        created=created,
        started=created,
        ended=state.updated or created,
        error=unended,
    )
