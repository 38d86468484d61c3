"""Runs that ended without reporting (a reboot, a ``kill -9`` of their owner): ``lost``.

A run is lost once its recorded process (its supervisor, its kernel, or torchrun for a
kernel's ``%%train --nproc``) and its owner (the process that records its end: the kernel
of a ``%%train --nproc``, which outlives its torchrun by the moment it takes to record) are
both gone, and neither its torchrun nor any of its ranks is left: ranks that are still
stopping after their owner died (they die with their agent) are given their time, so a run is
never declared over while something of it still trains or writes. Other processes carrying
its id (a helper its notebook started) do not keep it: they are leftovers, reported beside
the ended run and ended by ``jiyu stop`` (``run_processes.leftovers``), and the run's GPUs go
to the queue. Readers show such a
run lost at once; the store records it when a run owner takes the step (``RunStore.record_lost``).
Its end is dated by its last event, not by the moment it was noticed, and its event log ends
with an ``end`` saying ``lost``, after whatever its ranks wrote while they stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..events.log import EventLog, tail_events
from ..processes.run_processes import live_run_ids
from ..runs.files import RunFiles
from ..runs.model import EventKind, RunStatus
from .run_row import Run

QUEUED_GRACE_S = 120.0  # a run queued longer than this with no process behind it was never started
Alive = Callable[[int | None, float | None], bool]  # is the process of this pid, started then, alive
LOST_MESSAGE = "its process ended without reporting"
SOURCE = "store"  # who wrote the lost end: the store, on noticing (no owner was left to write it)


def vanished(runs: Iterable[Run], now: float, alive: Alive) -> list[str]:
    """The ids among active ``runs`` (with ``id``, ``pid``, ``pid_started``, ``owner_pid``,
    ``owner_started``, ``created``) whose recorded process and owner are both gone
    (``alive(pid, started)`` false) and of which no torchrun nor rank is left."""
    gone = [run.id for run in runs if not _lives(run, now, alive)]
    if not gone:
        return []
    running = live_run_ids()
    return [run_id for run_id in gone if run_id not in running]


def _lives(run: Run, now: float, alive: Alive) -> bool:
    """A run with no process recorded yet lives through the queued grace (its launcher is
    handing it over); then while its recorded process or its owner does."""
    if run.pid is None and run.owner_pid is None:
        return now - run.created <= QUEUED_GRACE_S
    return alive(run.pid, run.pid_started) or alive(run.owner_pid, run.owner_started)


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
    line = log_line(run_id)
    try:
        with EventLog(files.events) as log:
            log.append(EventKind.END.value, status=RunStatus.LOST.value, message=LOST_MESSAGE, source=SOURCE)
        if files.log.is_file():
            with open(files.log, "a", encoding="utf-8") as out:
                out.write(line)
    except OSError:
        pass  # the row says lost; a log that cannot be written (a full disk) stays as it was


def log_line(run_id: str, now: float | None = None) -> str:
    """The line a lost run's output log ends with (written when it is recorded; shown after the
    log by ``jiyu logs`` while it is only derived)."""
    last = last_event_time(run_id)
    heard = f" (last heard from at {time.strftime('%H:%M:%S', time.localtime(last))})" if last else ""
    return f"[jiyu] {time.strftime('%H:%M:%S', time.localtime(now))} run lost: {LOST_MESSAGE}{heard}\n"
