"""The run store: one SQLite row per run, in-kernel trainings and background jobs alike
(the file itself, its schema and its connections: ``store_db``)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import psutil

from ..events.log import summarize
from ..runs.files import RunFiles, run_dir, store_path
from ..runs.model import ACTIVE, RunKind, RunStatus
from . import lost_runs
from .database import StoreDatabase
from .leases import LeaseBook, RunGpu, end_leases

STATUSES = RunStatus.values()
KINDS = RunKind.values()
QUEUED_GRACE_S = lost_runs.QUEUED_GRACE_S
RECORD_FILE = "run.json"  # a copy of the row in the run's folder: what `jiyu store repair` rebuilds from


class UnknownRun(LookupError):
    """No run matches the id (or id prefix) the user gave."""


@dataclass
class Run:
    id: str
    name: str
    kind: RunKind  # stored, sent and shown as its string value
    status: RunStatus
    nproc: int = 1
    nnodes: int = 1
    notebook: str | None = None
    cwd: str | None = None
    host: str = ""
    backend: str = "local"
    params: dict = field(default_factory=dict)
    # the run's recorded process: what ``jiyu stop`` spares and waits for (a job's supervisor;
    # torchrun for a kernel's ``%%train --nproc``, so that a stop never reaches the kernel)
    pid: int | None = None
    pid_started: float | None = None  # its start time: a recycled pid is not the run's
    pgid: int | None = None
    # the process that records the run's end (its lifecycle owner: the kernel, the supervisor);
    # the run is not lost while it lives, even once ``pid`` ended. Never signalled for a kernel
    owner_pid: int | None = None
    owner_started: float | None = None
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    stop_requested: bool = False
    stop_grace: float | None = None  # seconds between SIGTERM and SIGKILL the stop asked for
    scheduler_id: str | None = None  # the job's id where a scheduler holds it (Slurm job id, Kubernetes name)
    queue_reason: str | None = None  # why a queued run waits, in the words of whoever holds it
    polled: float | None = None  # when a scheduler was last asked about this run
    gpus_requested: int | None = None  # GPUs the run waits for (0: a CPU job; None: it never queues)
    priority: int = 0  # higher starts first among waiting runs
    queue_rank: float | None = None  # the order among waiting runs of one priority (submission time)
    share: bool = False  # its GPUs may hold other sharing runs' leases too
    # its progress summary (``event_log.summarize``), stored once when it ended: listings of
    # thousands of finished runs read no event log. None while it runs (views read the log)
    summary: dict | None = None
    stalled_since: float | None = None  # while running: the time of the last step, which has not moved since
    #   for the run's stall timeout while its ranks live (``jobs.stall_watch``); a flag, not a status
    # not columns: filled in from the lease book when read
    gpus: list[RunGpu] = field(default_factory=list)  # the GPUs it holds or held: index, uuid, since, ended
    queue_position: int | None = None  # 1-based, while queued

    def __post_init__(self) -> None:
        self.kind, self.status = RunKind(self.kind), RunStatus(self.status)

    @property
    def active(self) -> bool:
        return self.status.active

    @property
    def stalled(self) -> bool:
        """Running, but its step has not moved for its stall timeout: shown beside ``running``."""
        return self.status == RunStatus.RUNNING and self.stalled_since is not None

    @property
    def duration(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    def to_dict(self) -> dict:
        """The fields as they are (no deep copy: a panel poll turns 50 runs into dicts)."""
        data = dict(vars(self))
        data["duration"] = self.duration
        return data

    @classmethod
    def from_row(cls, row: sqlite3.Row | dict) -> Run:
        """From a store row, or a run folder's record of one (whose unknown keys, from a newer
        jiyu, are ignored)."""
        data = dict(zip(row.keys(), row, strict=False)) if isinstance(row, sqlite3.Row) else dict(row)  # 4x dict(Row)
        if not data.keys() <= _COLUMNS:  # a row of a newer schema, or a record with more keys
            data = {k: v for k, v in data.items() if k in _COLUMNS}
        params = data.get("params")
        data["params"] = json.loads(params) if params and params != "{}" else {}
        data["summary"] = json.loads(data["summary"]) if data.get("summary") else None
        data["stop_requested"] = bool(data.get("stop_requested"))
        data["share"] = bool(data.get("share"))
        return cls(**data)

    from_record = from_row


DERIVED = frozenset({"gpus", "queue_position"})
_COLUMNS = {f.name for f in fields(Run)} - DERIVED


def _filters(include_finished: bool, since: float | None) -> tuple[str, list]:
    """The WHERE clause of a listing (active runs only unless ``include_finished``; created at
    or after ``since``) and its values."""
    where, values = [], []
    if not include_finished:
        where.append(f"status IN ({', '.join('?' * len(ACTIVE))})")
        values += ACTIVE
    if since is not None:
        where.append("created >= ?")
        values.append(float(since))
    return (f" WHERE {' AND '.join(where)}" if where else ""), values


def save_record(run: Run) -> None:
    """The row, copied into the run's folder when it is created and when it ends, so a lost or
    corrupt store can be rebuilt (``store_repair``). Best effort: the store is the authority."""
    folder = run_dir(run.id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temp = folder / f".{RECORD_FILE}.{os.getpid()}"
        temp.write_text(json.dumps(RunStore._to_row(run)))
        os.replace(temp, folder / RECORD_FILE)
    except OSError:
        pass


def new_run_id() -> str:
    """Eight hex digits: short enough to type in ``%job logs``, and any unique prefix works."""
    return secrets.token_hex(4)


def process_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def process_alive(pid: int | None, started: float | None) -> bool:
    """The process is alive and is the same process (not a recycled pid)."""
    if not pid:
        return False
    now_started = process_start_time(pid)
    if now_started is None:
        return False
    if started is not None and abs(now_started - started) > 1.0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class RunStore:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else store_path()
        self.host = socket.gethostname()
        self.db = StoreDatabase(self.path)
        self._read, self._write = self.db.read, self.db.write
        self.leases = LeaseBook(self.db, self.host)

    # -- writing ---------------------------------------------------------------------------
    def create(
        self, kind: RunKind | str, name: str | None = None, *, status: RunStatus | str = RunStatus.QUEUED, **values: Any
    ) -> Run:
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind!r}")
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}")
        unknown = set(values) - _COLUMNS
        if unknown:
            raise ValueError(f"unknown run fields: {', '.join(sorted(unknown))}")
        now = time.time()
        with self._write() as db:
            run_id = new_run_id()
            while db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                run_id = new_run_id()
            run = Run(
                id=run_id,
                name=name or f"{kind}-{run_id}",
                kind=kind,
                status=status,
                host=self.host,
                created=now,
                **{"cwd": os.getcwd(), "queue_rank": now, **values},
            )
            if run.status == RunStatus.RUNNING and run.started is None:
                run.started = now
            row = self._to_row(run)
            db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
        save_record(run)
        return run

    def restore(self, runs) -> int:
        """Writes runs back as they were (``jiyu store repair``), replacing rows of the same id."""
        rows = [self._to_row(run) for run in runs]
        with self._write() as db:
            for row in rows:
                db.execute(
                    f"INSERT OR REPLACE INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                    tuple(row.values()),
                )
        return len(rows)

    def update(self, run_id: str, **values: Any) -> Run:
        unknown = set(values) - _COLUMNS
        if unknown:
            raise ValueError(f"unknown run fields: {', '.join(sorted(unknown))}")
        if "status" in values and values["status"] not in STATUSES:
            raise ValueError(f"unknown status {values['status']!r}")
        if "params" in values:
            values["params"] = json.dumps(values["params"])
        if values.get("summary") is not None:
            values["summary"] = json.dumps(values["summary"])
        with self._write() as db:
            cur = db.execute(
                f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", (*values.values(), run_id)
            )
            if cur.rowcount == 0:
                raise UnknownRun(f"no run with id {run_id!r}")
        return self.get(run_id)

    def mark_running(self, run_id: str, pid: int, pgid: int | None = None) -> Run:
        return self.update(
            run_id,
            status=RunStatus.RUNNING,
            pid=pid,
            pid_started=process_start_time(pid),
            pgid=pgid,
            started=time.time(),
        )

    def mark_stalled(self, run_id: str, since: float | None) -> Run:
        """The stall flag of a running run: ``since`` the time of the step that stopped moving,
        None when it moved again."""
        return self.update(run_id, stalled_since=since)

    def request_stop(self, run_id: str, grace: float | None = None) -> Run:
        """Marks the run to be stopped; its supervisor honours ``grace`` (SIGTERM → SIGKILL)."""
        return self.update(run_id, stop_requested=1, stop_grace=grace)

    def claim_poll(self, run_id: str, every: float) -> bool:
        """Whether this caller should ask the scheduler about the run now: true for one caller
        per ``every`` seconds across every process sharing the store (the CLI, kernels, the
        server), so a scheduler is asked at most that often however many are watching."""
        now = time.time()
        with self._write() as db:
            cur = db.execute(
                "UPDATE runs SET polled = ? WHERE id = ? AND (polled IS NULL OR polled <= ?)",
                (now, run_id, now - every),
            )
            return cur.rowcount == 1

    def finish(
        self, run_id: str, status: RunStatus | str, exit_code: int | None = None, error: str | None = None
    ) -> Run:
        """The final status, as the run's owner decided it (a launched run: the one rule of
        ``jobs.final_status``; an in-kernel run: the engine). A run someone asked to stop ends
        ``stopped`` whatever failure the signal produced: the rule's own answer, kept here for
        owners outside the lifecycle. A run already finished keeps its first final status."""
        summary = self.stored_summary(run_id)  # before the write lock: it reads the event log
        with self._write() as db:
            row = db.execute("SELECT status, stop_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRun(f"no run with id {run_id!r}")
            if RunStatus(row["status"]) in (*ACTIVE, RunStatus.LOST):
                if row["stop_requested"] and status != RunStatus.SUCCEEDED:
                    status = RunStatus.STOPPED
                ended = time.time()
                db.execute(
                    "UPDATE runs SET status = ?, exit_code = ?, error = ?, ended = ?, summary = ?, "
                    "stalled_since = NULL WHERE id = ?",
                    (status, exit_code, error, ended, summary, run_id),
                )
                end_leases(db, [run_id], ended)
        run = self.get(run_id)
        save_record(run)
        return run

    # -- reading ---------------------------------------------------------------------------
    def get(self, run_id: str) -> Run:
        with self._read() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise UnknownRun(f"no run with id {run_id!r}")
        return self._with_gpus([Run.from_row(row)])[0]

    def resolve(self, id_or_prefix: str) -> Run:
        """A run by its id or a unique prefix of it (``%job logs 3fa``)."""
        prefix = (id_or_prefix or "").strip()
        if not prefix or not all(c in "0123456789abcdef" for c in prefix.lower()):
            raise UnknownRun(f"no run with id {id_or_prefix!r}")
        self.reconcile()
        with self._read() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE id LIKE ? ORDER BY created DESC LIMIT 2", (prefix.lower() + "%",)
            ).fetchall()
        if not rows:
            raise UnknownRun(f"no run with id {id_or_prefix!r}")
        if len(rows) > 1 and rows[0]["id"] != prefix.lower():
            raise UnknownRun(f"run id prefix {id_or_prefix!r} is ambiguous; give more characters")
        return self._with_gpus([Run.from_row(rows[0])])[0]

    def list(
        self,
        include_finished: bool = True,
        limit: int | None = None,
        reconcile: bool = True,
        annotate: bool = True,
        since: float | None = None,
    ) -> list[Run]:
        """Runs newest first, the ``limit`` newest created at or after ``since`` (epoch
        seconds); ``reconcile`` first marks ``lost`` those whose process is gone; ``annotate``
        fills in their GPUs and queue positions. Finished runs carry their stored summaries."""
        if reconcile:
            self.reconcile()
        where, values = _filters(include_finished, since)
        query = f"SELECT * FROM runs{where} ORDER BY created DESC"
        if limit:
            query += f" LIMIT {int(limit)}"
        with self._read() as db:
            rows = db.execute(query, values).fetchall()
        runs = self._with_summaries([Run.from_row(r) for r in rows])
        return self._with_gpus(runs) if annotate else runs

    def _with_gpus(self, runs: list[Run]) -> list[Run]:
        """Each run with the GPUs it holds or held and, while queued, its place in the queue."""
        held = self.leases.of_runs([r.id for r in runs])
        places = {w.run_id: w.position for w in self.leases.queue()} if any(r.status == "queued" for r in runs) else {}
        for run in runs:
            run.gpus = [lease.to_dict() for lease in held.get(run.id, [])]
            run.queue_position = places.get(run.id)
        return runs

    def count(self, include_finished: bool = True, since: float | None = None) -> int:
        """How many runs ``list`` would give without a limit (a page says how many it left out)."""
        where, values = _filters(include_finished, since)
        with self._read() as db:
            return db.execute(f"SELECT COUNT(*) FROM runs{where}", values).fetchone()[0]

    def count_by_status(self) -> dict[str, int]:
        """How many runs are in each status, counted by SQLite (``/metrics`` scrapes this)."""
        with self._read() as db:
            return dict(db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())

    def reconcile(self) -> list[str]:
        """Marks ``lost`` the active runs of this host whose recorded process and owner are both
        gone (a reboot, a ``kill -9``) and of which nothing is left running (``lost_runs``), so
        nothing shows ``running`` forever, while a run whose torchrun just exited stays active
        until its living owner (a kernel) records the end. Returns the ids it marked. Runs
        handed to Slurm or Kubernetes have no local process to watch and are left alone."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT id, pid, pid_started, owner_pid, owner_started, created FROM runs WHERE host = ? "
                f"AND backend = 'local' AND status IN ({', '.join('?' * len(ACTIVE))})",
                (self.host, *ACTIVE),
            ).fetchall()
        now = time.time()
        lost = lost_runs.vanished(rows, now, process_alive)
        marked = []
        with self._write() as db:
            for run_id in lost:
                changed = db.execute(
                    f"UPDATE runs SET status = ?, ended = COALESCE(ended, ?), error = COALESCE(error, ?) "
                    f"WHERE id = ? AND status IN ({', '.join('?' * len(ACTIVE))})",
                    (RunStatus.LOST, lost_runs.last_event_time(run_id) or now, lost_runs.LOST_MESSAGE, run_id, *ACTIVE),
                )
                marked += [run_id] * changed.rowcount
            end_leases(db, marked, now)
        for run_id in marked:
            lost_runs.close_log(run_id)
        self._store_summaries(marked)  # after the lost end is in the log
        return marked

    def _store_summaries(self, run_ids: list[str]) -> None:
        if run_ids:
            summaries = [(self.stored_summary(run_id), run_id) for run_id in run_ids]
            with self._write() as db:
                db.executemany("UPDATE runs SET summary = ? WHERE id = ?", summaries)

    def stored_summary(self, run_id: str) -> str:
        """The summary of an ending run's event log, as the store keeps it (JSON). Read once,
        from the log's tail (a few milliseconds however long the run was), when the end is
        recorded, so no listing summarises a finished run's log again."""
        summary = summarize(RunFiles.of(run_id, self.path.parent).events)
        # a sparkline's precision: half the text to parse for each run a listing reads
        summary["losses"] = [float(f"{x:.4g}") if isinstance(x, float) else x for x in summary["losses"]]
        return json.dumps(summary)

    def _with_summaries(self, runs: list[Run]) -> list[Run]:
        """Finished runs recorded before summaries were stored (a store migrated from schema 4)
        get theirs now, once: the next listing reads them from the store."""
        missing = [run for run in runs if run.summary is None and not run.active]
        if missing:
            for run in missing:
                run.summary = json.loads(self.stored_summary(run.id))
            with self._write() as db:
                db.executemany(
                    "UPDATE runs SET summary = ? WHERE id = ? AND summary IS NULL",
                    [(json.dumps(run.summary), run.id) for run in missing],
                )
        return runs

    @staticmethod
    def _to_row(run: Run) -> dict:
        row = {k: v for k, v in asdict(run).items() if k not in DERIVED}
        row["params"] = json.dumps(row["params"])
        row["summary"] = None if row["summary"] is None else json.dumps(row["summary"])
        row["stop_requested"] = int(row["stop_requested"])
        row["share"] = int(row["share"])
        return row
