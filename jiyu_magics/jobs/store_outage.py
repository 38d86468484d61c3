"""What a run's owner does while the run store cannot be used: the run goes on.

A store deleted under a running job (a stray ``rm ~/.jiyu/jiyu.sqlite*``), replaced, corrupt,
or held by another process's write lock past the busy timeout is no reason to end a run whose
ranks train well. The owner keeps its ranks running and keeps what it knows of the run (its
last row, and what changed since: the ranks started, the run ended) in the run folder
(``run.json``, the event log), which ``jiyu store repair`` reads; it tries the store again every
few seconds, and once the store answers (a deleted one is made anew, as any command would) it
registers the run there again as it knows it, so ``jiyu jobs`` lists it with its real state and
the end is recorded there as usual.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..core.events.log import EventLog, read_events
from ..core.runs.files import RunFiles
from ..core.runs.model import RunStatus
from ..core.store.database import StoreBusy, StoreUnusable
from ..core.store.leases import Lease
from ..core.store.run_row import Run, UnknownRun, save_record
from ..core.store.run_store import RunStore
from .final_status import Outcome, closing_events

RETRY_S = 2.0  # how often the store is tried again while it is out
END_WAIT_S = 300.0  # how long an ended run's owner waits for the store to record the end there too
BUSY_SAY_S = 60.0
# A queued owner whose store came back waits this long before taking a place: the owners of
# running runs (who look at the store every couple of seconds) register theirs again first,
# so no place is given twice.
SETTLE_S = 5.0
LOST = (StoreUnusable, UnknownRun)  # an answer that means "out": the row is gone with its store


class StoreOutage:
    def __init__(
        self,
        run_id: str,
        store: RunStore,
        note: Callable[[str], None] | None = None,
        leases: Callable[[], Sequence[Lease]] = tuple,
    ):
        """``leases()``: the GPU leases the run holds, registered again with it."""
        self.run_id, self.store, self.leases = run_id, store, leases
        self.note = note or (lambda line: None)
        self.known: Run | None = None  # the row as last read or as changed since
        self.since: float | None = None  # when the store went out; None while it answers
        self._tried = -float("inf")
        self._started: dict[str, Any] | None = None  # mark_running's fields, not written yet
        self._busy_said = -float("inf")
        self._back_at = -float("inf")

    @property
    def out(self) -> bool:
        return self.since is not None

    def seen(self, run: Run) -> Run:
        self.known = run
        return run

    def lost(self, problem: Exception) -> None:
        """The store failed the owner: said once, and the run's state kept in its folder. A busy
        store is healthy: said (at most every ``BUSY_SAY_S``) and tried again, nothing more."""
        if isinstance(problem, StoreBusy):
            if time.monotonic() - self._busy_said >= BUSY_SAY_S:
                self._busy_said = time.monotonic()
                self.note(f"{problem.holder}: the run goes on and tries again")
            return
        if self.since is None:
            self.since = time.time()
            why = str(problem) if isinstance(problem, StoreUnusable) else "the run store no longer has this run"
            self.note(f"the store is out ({why}); the run goes on, kept in its folder until the store is back")
        if self.known is not None:
            save_record(self.known)

    def ranks_started(self, fields: dict[str, Any]) -> None:
        """The ranks started while the store was out: running, with their pid, once it is back."""
        self._started = fields
        if self.known is not None:
            self.known = replace(self.known, status=RunStatus.RUNNING, **fields)
            save_record(self.known)

    def back(self, force: bool = False) -> bool:
        """Whether the store answers (it always does until it failed once). While it is out,
        tried at most every ``RETRY_S`` (``force``: now): made anew where it was deleted, and
        the run registered again as this owner knows it."""
        if self.since is None:
            return True
        if not force and time.monotonic() - self._tried < RETRY_S:
            return False
        self._tried = time.monotonic()
        try:
            self.store.db.reopen()
            try:
                row = self.store.stored(self.run_id)
                registered = False
            except UnknownRun:
                if self.known is None:
                    return False  # nothing to register: its record in the folder is all there is
                # none when a repair restored it from its folder in the meantime: that row stands
                registered = (
                    self.store.restore([self.known], "registered again by its owner when the store was back") == 1
                )
                self.store.leases.restore(self.leases())
                row = self.known if registered else self.store.stored(self.run_id)
            if self._started is not None and row.status in (RunStatus.QUEUED, RunStatus.STARTING):
                self.store.mark_running(self.run_id, pid=self._started["pid"], pgid=self._started.get("pgid"))
            self.known = self.store.stored(self.run_id)
        except LOST:
            return False
        self._started = None
        self._back_at = time.monotonic()
        took = time.time() - self.since
        self.since = None
        again = f"registered again as {self.known.status}" if registered else "found there"
        self.note(f"the store is back after {took:.0f} s: the run is {again}")
        return True

    @property
    def settling(self) -> bool:
        """The store came back a moment ago: other owners may not have registered their runs."""
        return time.monotonic() - self._back_at < SETTLE_S

    def keep_end(self, outcome: Outcome) -> None:
        """The end, in the run folder, when the store cannot take it: the closing events in the
        event log and the final row in ``run.json`` (what a repair restores)."""
        files = RunFiles.of(self.run_id)
        try:
            added = closing_events(read_events(files.events)[0], outcome)
            if added:
                with EventLog(files.events) as log:
                    for kind, fields in added:
                        log.append(kind, **fields)
        except OSError:
            pass
        if self.known is not None:
            ended = replace(
                self.known, status=outcome.status, exit_code=outcome.exit_code, error=outcome.error, ended=time.time()
            )
            save_record(ended)

    def retry_busy(self, write: Callable[[], Any]) -> Any:
        """``write()``, again while the store is busy (another process's long transaction is no
        failure of this run), for up to ``END_WAIT_S``."""
        deadline = time.monotonic() + END_WAIT_S
        while True:
            try:
                return write()
            except StoreBusy as busy:
                if time.monotonic() > deadline:
                    raise
                self.lost(busy)
                time.sleep(RETRY_S)
                self.back(force=True)
