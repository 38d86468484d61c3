"""The run store: one SQLite row per run, in-kernel trainings and background jobs alike (the
file, its schema and connections: ``database``; the row: ``run_row``).

Reads derive, writers write. ``get``, ``resolve``, ``list`` and the counts write nothing: an
active run of this host whose recorded process and owner are gone, with nothing of it left
running, is shown ``lost`` at read time (``Run.derived``). Recording that is an explicit step,
``record_lost``, taken by the processes that own runs (supervisors, a kernel starting a run,
the Jupyter server's sampler, the next submit, a queued run's owner), at most every
``RECORD_LOST_EVERY_S`` seconds per process: the stored state catches up within that time
while any of them runs, and at the next one that starts otherwise.

Every status change goes through ``transition`` (``transitions.move``, the state machine's
compare-and-set), and a run's first status through ``create`` or ``restore`` (``transitions.arrive``,
its born or restored arrival); ``update`` writes any other column and refuses ``status``.
"""

from __future__ import annotations

import builtins  # `RunStore.list` hides the builtin inside the class: its annotations say builtins.list
import functools
import json
import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..events.log import MAX_TEXT_CHARS, summarize
from ..processes.info import process_alive, process_start_time
from ..runs import states
from ..runs.files import RunFiles, store_path
from ..runs.model import ACTIVE, RunKind, RunStatus
from ..text import bounded
from . import lost_runs
from .box_leases import lease_book
from .database import StoreDatabase
from .leases import LeaseBook
from .run_row import COLUMNS, ForeignRun, new_run_id, save_record
from .run_row import Run as Run  # the store's record and its lookup error, re-exported
from .run_row import UnknownRun as UnknownRun
from .transitions import arrive, move

STATUSES = RunStatus.values()
KINDS = RunKind.values()
RECORD_LOST_EVERY_S = 5.0
_recorded_lost: dict[Path, float] = {}  # per store file: when this process last recorded lost runs


def _filters(include_finished: bool, since: float | None) -> tuple[str, list]:
    """The WHERE clause of a listing (active runs only unless ``include_finished``; created at
    or after ``since``) and its values."""
    where: list[str] = []
    values: list[Any] = []
    if not include_finished:
        where.append(f"status IN ({', '.join('?' * len(ACTIVE))})")
        values += ACTIVE
    if since is not None:
        where.append("created >= ?")
        values.append(float(since))
    return (f" WHERE {' AND '.join(where)}" if where else ""), values


class RunStore:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path else store_path()
        self.host = socket.gethostname()
        self.db = StoreDatabase(self.path)
        self._read, self._write = self.db.read, self.db.write
        self.leases: LeaseBook = lease_book(self.db, self.host)

    # -- writing ---------------------------------------------------------------------------
    def create(
        self,
        kind: RunKind | str,
        name: str | None = None,
        *,
        status: RunStatus | str = RunStatus.QUEUED,
        born_because: str = "registered",
        **values: Any,
    ) -> Run:
        """A new run, born ``queued`` (a launcher's) or ``running`` (a ``fit`` that registers
        itself as it starts)."""
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind!r}")
        if status not in STATUSES or RunStatus(status) not in states.BORN:
            raise ValueError(f"a run cannot be born {status!r}")
        _check_columns(values)
        now = time.time()
        with self._write() as db:
            run_id = new_run_id()
            while db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                run_id = new_run_id()
            fields = {"cwd": os.getcwd(), "queue_rank": now, **values}
            run = Run(
                id=run_id,
                name=name or f"{kind}-{run_id}",
                kind=RunKind(kind),
                status=RunStatus(status),
                host=self.host,
                created=now,
                **fields,
            )
            if run.status == RunStatus.RUNNING and run.started is None:
                run.started = now
            arrive(db, run.to_row(), "born", born_because)
        save_record(run)
        return run

    def transition(
        self,
        run_id: str,
        expected: Iterable[RunStatus],
        target: RunStatus,
        reason: str,
        *,
        then: Callable[[], None] | None = None,
        **values: Any,
    ) -> Run:
        """The run moved from one of ``expected`` to ``target`` (with ``values`` beside it) in
        one transaction, or ``states.TransitionRefused`` and nothing written. An end also runs
        ``then`` first (the owner's closing events), stores the summary and ends the leases."""
        _check_columns(values)
        target = RunStatus(target)
        with self._write() as db:
            move(
                db,
                run_id,
                expected,
                target,
                reason,
                _encoded(values),
                then=then,
                summary=lambda: self.stored_summary(run_id),
            )
        if target.final:
            self.leases.ended([run_id])  # a box's book hears it once the home store says it
        run = self.stored(run_id)
        save_record(run)  # the folder says the run's state too: a lost store is rebuilt from it
        return run

    def mark_running(self, run_id: str, pid: int, pgid: int | None = None) -> Run:
        """Its ranks started: ``pid`` is the process a stop spares and waits for (torchrun or the
        supervisor). A run already running (born so) or stopping keeps its status."""
        fields: dict[str, Any] = {
            "pid": pid,
            "pid_started": process_start_time(pid),
            "pgid": pgid,
            "started": time.time(),
        }
        try:
            return self.transition(
                run_id, {RunStatus.QUEUED, RunStatus.STARTING}, RunStatus.RUNNING, "its ranks started", **fields
            )
        except states.TransitionRefused as refused:
            if refused.current not in (RunStatus.RUNNING, RunStatus.STOPPING):
                raise
            return self.update(run_id, **fields)

    def finish(
        self,
        run_id: str,
        status: RunStatus | str,
        exit_code: int | None = None,
        error: str | None = None,
        *,
        then: Callable[[], None] | None = None,
    ) -> Run:
        """Its owner's word on how it ended, from any active state or from the ``lost`` the
        store took it for; ``TransitionRefused`` when another end was recorded first."""
        expected = states.ACTIVE | {RunStatus.LOST}
        return self.transition(
            run_id,
            expected,
            RunStatus(status),
            "its owner recorded the end",
            then=then,
            exit_code=exit_code,
            error=error,
        )

    def update(self, run_id: str, **values: Any) -> Run:
        """Columns other than the status (which only ``transition`` writes)."""
        if "status" in values:
            raise ValueError("a run's status changes only through RunStore.transition")
        _check_columns(values)
        values = _encoded(values)
        with self._write() as db:
            cur = db.execute(
                f"UPDATE runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?", (*values.values(), run_id)
            )
            if cur.rowcount == 0:
                raise UnknownRun(f"no run with id {run_id!r}")
        return self.stored(run_id)

    def restore(self, runs: Iterable[Run], reason: str) -> int:
        """Writes runs back as their records say (``jiyu store repair``, an owner registering
        its run again after a store outage), each noted in its history as ``restored`` with
        ``reason``; returns how many. A run the store has a row of keeps it: the row is newer."""
        runs = builtins.list(runs)
        if any(run.derived for run in runs):
            raise ValueError("a derived status (lost at read time) was never stored: it cannot be restored")
        restored = 0
        with self._write() as db:
            for run in runs:
                try:
                    arrive(db, run.to_row(), "restored", reason)
                    restored += 1
                except states.TransitionRefused:
                    pass
        return restored

    def mark_stalled(self, run_id: str, since: float | None) -> Run:
        """The stall flag of a running run: ``since`` the time of the step that stopped moving,
        None when it moved again."""
        return self.update(run_id, stalled_since=since)

    def request_stop(self, run_id: str, grace: float | None = None) -> Run:
        """Marks the run to be stopped (its owner honours ``grace``: SIGTERM → SIGKILL); a run
        that is starting or running turns ``stopping`` in the same transaction. A queued run
        keeps its place until its owner sees the request and ends it ``stopped``."""
        with self._write() as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRun(f"no run with id {run_id!r}")
            db.execute("UPDATE runs SET stop_requested = 1, stop_grace = ? WHERE id = ?", (grace, run_id))
            if row["status"] in (RunStatus.STARTING, RunStatus.RUNNING):
                move(db, run_id, {RunStatus(row["status"])}, RunStatus.STOPPING, "a stop was requested")
        return self.stored(run_id)

    def record_lost(self, every: float = RECORD_LOST_EVERY_S) -> builtins.list[str]:
        """Records ``lost`` for the active runs of this host that reads show lost: their recorded
        process and owner are gone and nothing of them runs. Their event logs end with a lost
        end and their leases end, in the transaction that moves each. Taken by run owners, at
        most every ``every`` seconds per process (0: now); returns the ids it recorded."""
        now = time.time()
        if now - _recorded_lost.get(self.path, -float("inf")) < every:
            return []
        _recorded_lost[self.path] = now
        marked = []
        for run in self._vanished(self._active_here()):
            try:
                self.transition(
                    run.id,
                    states.ACTIVE,
                    RunStatus.LOST,
                    "its processes are gone",
                    then=functools.partial(lost_runs.close_log, run.id),
                    ended=lost_runs.last_event_time(run.id) or now,
                    error=run.error or lost_runs.LOST_MESSAGE,
                )
            except states.TransitionRefused:
                continue  # its owner recorded its end in the meantime
            marked.append(run.id)
        return marked

    def store_missing_summaries(self) -> builtins.list[str]:
        """Stores the summary of each ended run that has none (recorded before summaries were
        stored: a store migrated from schema 4), folding its log once, so that later listings
        need no log. Taken by upkeep; a listing derives the same summary in memory meanwhile."""
        final = [status.value for status in states.FINAL]
        with self._read() as db:
            ids = [
                row["id"]
                for row in db.execute(
                    f"SELECT id FROM runs WHERE summary IS NULL AND status IN ({', '.join('?' * len(final))})", final
                )
            ]
        for run_id in ids:
            summary = self.stored_summary(run_id)  # the log folded before the write lock is taken
            with self._write() as db:
                db.execute("UPDATE runs SET summary = ? WHERE id = ? AND summary IS NULL", (summary, run_id))
        return ids

    # -- reading (writes nothing) ----------------------------------------------------------------
    def stored(self, run_id: str) -> Run:
        """The row as stored, with its GPUs: what a writer reads back."""
        with self._read() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._unknown(run_id)
        return self._with_gpus([Run.from_row(row)])[0]

    def get(self, run_id: str) -> Run:
        """The run as readers show it: ``lost`` when its processes are gone (derived)."""
        return self._derived([self.stored(run_id)])[0]

    def resolve(self, id_or_prefix: str) -> Run:
        """A run by its id or a unique prefix of it (``%job logs 3fa``)."""
        prefix = (id_or_prefix or "").strip()
        if not prefix or not all(c in "0123456789abcdef" for c in prefix.lower()):
            raise UnknownRun(f"no run with id {id_or_prefix!r}")
        with self._read() as db:
            rows = db.execute(
                "SELECT * FROM runs WHERE id LIKE ? ORDER BY created DESC LIMIT 2", (prefix.lower() + "%",)
            ).fetchall()
        if not rows:
            raise self._unknown(prefix.lower())
        if len(rows) > 1 and rows[0]["id"] != prefix.lower():
            raise UnknownRun(f"run id prefix {id_or_prefix!r} is ambiguous; give more characters")
        return self._derived(self._with_gpus([Run.from_row(rows[0])]))[0]

    def list(
        self, include_finished: bool = True, limit: int | None = None, annotate: bool = True, since: float | None = None
    ) -> builtins.list[Run]:
        """Runs newest first, the ``limit`` newest created at or after ``since`` (epoch
        seconds), with statuses as readers show them (``lost`` derived); ``annotate`` fills in
        their GPUs and queue positions. Finished runs carry their stored summaries."""
        where, values = _filters(include_finished, since)
        query = f"SELECT * FROM runs{where} ORDER BY created DESC"
        if limit:  # SQLite's integers are 64-bit: a larger limit is no limit
            query += f" LIMIT {min(int(limit), 2**62)}"
        with self._read() as db:
            rows = db.execute(query, values).fetchall()
        runs = self._derived(self._with_summaries([Run.from_row(r) for r in rows]))
        return self._with_gpus(runs) if annotate else runs

    def count(self, include_finished: bool = True, since: float | None = None) -> int:
        """How many runs ``list`` would give without a limit (a page says how many it left out)."""
        where, values = _filters(include_finished, since)
        with self._read() as db:
            count: int = db.execute(f"SELECT COUNT(*) FROM runs{where}", values).fetchone()[0]
            return count

    def count_by_status(self) -> dict[str, int]:
        """How many runs are in each status as readers show them (``/metrics`` scrapes this):
        SQLite counts the stored statuses, and the active runs of this host whose processes
        are gone move to ``lost``."""
        with self._read() as db:
            counts = dict(db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status").fetchall())
        for run in self._vanished(self._active_here()):
            counts[run.status.value] -= 1
            counts[RunStatus.LOST.value] = counts.get(RunStatus.LOST.value, 0) + 1
        return {status: count for status, count in counts.items() if count}

    def history(self, run_id: str) -> builtins.list[tuple[str | None, str, str]]:
        """The run's states in order, each as (from, to, reason): its birth has no from."""
        with self._read() as db:
            rows = db.execute(
                "SELECT from_status, to_status, reason FROM transitions WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def stored_summary(self, run_id: str) -> str:
        """The summary of an ending run's event log, as the store keeps it (JSON). Read once,
        from the log's tail (a few milliseconds however long the run was), when the end is
        recorded, so no listing summarises a finished run's log again."""
        summary = summarize(RunFiles.of(run_id, self.path.parent).events)
        # a sparkline's precision: half the text to parse for each run a listing reads
        summary["losses"] = [float(f"{x:.4g}") if isinstance(x, float) else x for x in summary["losses"]]
        return json.dumps(summary)

    def _unknown(self, run_id: str) -> UnknownRun:
        """No such run here; on a box, another user's run of that id is named as theirs."""
        owner = self.leases.owner_of(run_id) if run_id else None
        return ForeignRun(run_id, owner) if owner else UnknownRun(f"no run with id {run_id!r}")

    # -- deriving ----------------------------------------------------------------------------------
    def _active_here(self) -> builtins.list[Run]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT * FROM runs WHERE host = ? AND backend = 'local' "
                f"AND status IN ({', '.join('?' * len(ACTIVE))})",
                (self.host, *ACTIVE),
            ).fetchall()
        return [Run.from_row(row) for row in rows]

    def _vanished(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        """The active local runs of this host of which nothing is left (``lost_runs.vanished``)."""
        candidates = [r for r in runs if r.active and r.host == self.host and r.backend == "local"]
        gone = set(lost_runs.vanished(candidates, time.time(), process_alive)) if candidates else set()
        return [run for run in runs if run.id in gone]

    def _derived(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        """The runs as readers show them: those whose processes are gone are ``lost``, dated
        by their last event, and hold no place in the queue (nothing is written)."""
        for run in self._vanished(runs):
            run.status, run.derived = RunStatus.LOST, True
            run.ended = run.ended or lost_runs.last_event_time(run.id) or time.time()
            run.error = run.error or lost_runs.LOST_MESSAGE
            run.queue_position = None
        return runs

    def _with_gpus(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        """Each run with the GPUs it holds or held and, while queued, its place in the queue."""
        held = self.leases.of_runs([r.id for r in runs])
        waiting = any(r.status == RunStatus.QUEUED for r in runs)
        places = {w.run_id: w.position for w in self.leases.queue()} if waiting else {}
        for run in runs:
            run.gpus = [lease.to_dict() for lease in held.get(run.id, [])]
            run.queue_position = places.get(run.id) if run.status == RunStatus.QUEUED else None
        return runs

    def _with_summaries(self, runs: builtins.list[Run]) -> builtins.list[Run]:
        """Finished runs recorded before summaries were stored (a store migrated from schema 4)
        get theirs from their logs, in memory: a listing writes nothing."""
        for run in runs:
            if run.summary is None and not run.active:
                run.summary = json.loads(self.stored_summary(run.id))
        return runs


def _check_columns(values: dict[str, Any]) -> None:
    unknown = set(values) - COLUMNS
    if unknown:
        raise ValueError(f"unknown run fields: {', '.join(sorted(unknown))}")


def _encoded(values: dict[str, Any]) -> dict[str, Any]:
    """Values as the columns hold them (JSON text for params and summary; an error bounded as
    the event log bounds its text: a listing of runs stays small whatever a run raised)."""
    values = dict(values)
    if isinstance(values.get("error"), str):
        values["error"] = bounded(values["error"], MAX_TEXT_CHARS, MAX_TEXT_CHARS)
    if "params" in values:
        values["params"] = json.dumps(values["params"])
    if values.get("summary") is not None and not isinstance(values["summary"], str):
        values["summary"] = json.dumps(values["summary"])
    return values
