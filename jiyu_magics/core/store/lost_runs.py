"""Runs that ended without reporting (a reboot, a ``kill -9`` of their owner): ``lost``.

A run is lost once its recorded process (its supervisor, its kernel, or torchrun for a
kernel's ``%%train --nproc``) and its owner (the process that records its end: the kernel
of a ``%%train --nproc``, which outlives its torchrun by the moment it takes to record) are
both gone, and no process carrying its id is left: ranks that are
still stopping after their owner died (they die with their agent) are given their time, so a
run is never declared over while something of it still trains or writes. Its end is dated by
its last event, not by the moment a listing noticed, and its event log ends with an ``end``
saying ``lost``, after whatever its ranks wrote while they stopped (their ``stopped``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ..events.log import EventLog, tail_events
from ..processes.run_processes import live_run_ids
from ..runs.files import RunFiles
from ..runs.model import EventKind, RunStatus

QUEUED_GRACE_S = 120.0  # a run queued longer than this with no process behind it was never started
LOST_MESSAGE = "its process ended without reporting"
SOURCE = "store"  # who wrote the lost end: the store, on noticing (no owner was left to write it)


def vanished(rows: Iterable, now: float, alive) -> list[str]:
    """The ids among active ``rows`` (id, pid, pid_started, owner_pid, owner_started, created)
    whose recorded process and owner are both gone (``alive(pid, started)`` false) and of
    which no process is left."""
    gone = [row["id"] for row in rows if not _lives(row, now, alive)]
    if not gone:
        return []
    running = live_run_ids()
    return [run_id for run_id in gone if run_id not in running]


def _lives(row, now: float, alive) -> bool:
    """A run with no process recorded yet lives through the queued grace (its launcher is
    handing it over); then while its recorded process or its owner does."""
    if row["pid"] is None and row["owner_pid"] is None:
        return now - row["created"] <= QUEUED_GRACE_S
    return alive(row["pid"], row["pid_started"]) or alive(row["owner_pid"], row["owner_started"])


def last_event_time(run_id: str) -> float | None:
    events = tail_events(RunFiles.of(run_id).events)
    return events[-1].get("t") if events else None


def close_log(run_id: str) -> None:
    """The lost end in the run's event log (when it has a folder), after everything else, and
    one line at the end of its output log, so ``jiyu logs`` (``-f`` too) says how it ended, as
    it does for a run whose owner wrote its end."""
    files = RunFiles.of(run_id)
    if not files.root.is_dir():
        return
    last = last_event_time(run_id)
    try:
        with EventLog(files.events) as log:
            log.append(EventKind.END.value, status=RunStatus.LOST.value, message=LOST_MESSAGE, source=SOURCE)
        if files.log.is_file():
            heard = f" (last heard from at {time.strftime('%H:%M:%S', time.localtime(last))})" if last else ""
            with open(files.log, "a", encoding="utf-8") as out:
                out.write(f"[jiyu] {time.strftime('%H:%M:%S')} run lost: {LOST_MESSAGE}{heard}\n")
    except OSError:
        pass  # the row says lost; a log that cannot be written (a full disk) stays as it was
