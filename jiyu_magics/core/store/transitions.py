"""The one writer of a run's status: a compare-and-set inside the caller's write transaction.

Every status the store holds was written here: by ``arrive`` (a run's first row, born or
restored from its record) or by ``move``. A caller says which states it expects the run
to be in and where it takes it; ``move`` checks both against the state machine
(``runs.states``) on the row as it is inside the transaction (``BEGIN IMMEDIATE``: writers
queue, so two of them never both see the state they expect), and refuses with
``TransitionRefused`` otherwise. Called by ``RunStore.transition`` and, where a status moves
together with leases, by the lease book in its own transaction.

An end is recorded whole: ``then`` runs inside the transaction before the row is written (the
owner's closing events in the run's event log), the run's progress summary is read after it,
and the run's leases end in the same transaction, so a reader who sees the final status finds
the whole log, and a writer who lost the race has written nothing. Each move is noted with its
reason in the ``transitions`` table: a run's history of states.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..runs import states
from ..runs.model import RunStatus
from .run_row import UnknownRun

LIVE_LEASE = "ended IS NULL"


def move(
    db: sqlite3.Connection,
    run_id: str,
    expected: Iterable[RunStatus],
    target: RunStatus,
    reason: str,
    values: dict[str, Any] | None = None,
    *,
    then: Callable[[], None] | None = None,
    summary: Callable[[], str | None] | None = None,
) -> RunStatus:
    """Moves the run from one of ``expected`` to ``target`` with ``values`` written beside it;
    returns the state it left. A final state dates the end (``values['ended']`` or now), clears
    the stall flag, ends the run's leases and stores ``summary()``."""
    row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise UnknownRun(f"no run with id {run_id!r}")
    current = RunStatus(row["status"])
    target = RunStatus(target)
    states.check(run_id, current, frozenset(map(RunStatus, expected)), target, reason)
    values = dict(values or {})
    if target is RunStatus.RUNNING and "started" not in values:
        values["started"] = db.execute("SELECT started FROM runs WHERE id = ?", (run_id,)).fetchone()[0] or time.time()
    if target.final:
        values["ended"] = values.get("ended") or time.time()
        values["stalled_since"] = None
        end_leases(db, [run_id], values["ended"])
    elif target is RunStatus.QUEUED:  # requeued (a scheduler's requeue, a preemption): it holds nothing while it waits
        end_leases(db, [run_id], time.time())
    if then is not None:
        then()
    if target.final and summary is not None:
        values["summary"] = summary()
    columns = ", ".join(f"{name} = ?" for name in ("status", *values))
    db.execute(f"UPDATE runs SET {columns} WHERE id = ?", (target.value, *values.values(), run_id))
    note(db, run_id, current, target, reason)
    return current


def arrive(db: sqlite3.Connection, row: dict[str, Any], how: str, reason: str) -> None:
    """Writes a run's first row, ``how`` it arrives (``states.ARRIVALS``: ``born``, or
    ``restored`` from its record in the state that says), noted as a move from no state;
    ``TransitionRefused`` and nothing written when the store has a row of its id already."""
    run_id, target = row["id"], RunStatus(row["status"])
    present = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    states.check_arrival(run_id, None if present is None else RunStatus(present["status"]), how, target, reason)
    db.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))
    note(db, run_id, None, target, reason)


def note(db: sqlite3.Connection, run_id: str, source: RunStatus | None, target: RunStatus, reason: str) -> None:
    """The run's history of states (``RunStore.history``): who moved it, when and why."""
    db.execute(
        "INSERT INTO transitions (run_id, at, from_status, to_status, reason, pid) VALUES (?, ?, ?, ?, ?, ?)",
        (run_id, time.time(), None if source is None else source.value, target.value, reason, os.getpid()),
    )


def end_leases(db: sqlite3.Connection, run_ids: Iterable[str], when: float) -> None:
    """Ends the live leases of these runs (inside the write transaction that ends the runs)."""
    db.executemany(f"UPDATE gpu_leases SET ended = ? WHERE run_id = ? AND {LIVE_LEASE}", [(when, r) for r in run_ids])
