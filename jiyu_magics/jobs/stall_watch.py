"""The run owner's eye on a stall: a run whose step has not moved for its stall timeout while
its ranks live is flagged ``stalled`` in the run store (beside ``running``: not a status),
every rank's stack is dumped (``stack_dump``) and a ``stall`` event names the folder. When the
step moves again the flag goes, and a second ``stall`` event says when it cleared and how long
it lasted, so the run page still tells of it afterwards. Both go into the run's log too, as
``[jiyu]`` lines.

The owner calls ``check`` from its follow loop; it does its work at most every ``CHECK_S``,
reading only what the event log gained since (``core.stall_clock`` folds it).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core.events.log import EventLog, read_events
from ..core.events.stall_clock import StallClock
from ..core.runs.files import RunFiles
from ..core.store.run_store import RunStore
from .stack_dump import dump_stacks

CHECK_S = 2.0


class StallWatch:
    def __init__(self, run_id: str, store: RunStore, default_timeout: float | None = None, every: float = CHECK_S):
        self.run_id, self.store, self.every = run_id, store, every
        self.files = RunFiles.of(run_id)
        self.clock = StallClock(default_timeout)
        self.offset = 0
        self.flagged: float | None = None  # the ``since`` of the stall flagged now
        self._next = 0.0

    def check(self) -> None:
        """Flags a new stall (and dumps the stacks) or clears one the step moved out of."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.every
        events, self.offset = read_events(self.files.events, self.offset)
        self.clock.feed(events)
        since = self.clock.stalled_since(time.time())
        if since == self.flagged:
            return
        # the stacks first, then the flag: whoever sees the run stalled (``jiyu stacks``, the
        # panel's Stacks button) finds the whole dump
        folder = dump_stacks(self.run_id) if since is not None else None
        self.store.mark_stalled(self.run_id, since)
        flagged, self.flagged = self.flagged, since
        if since is not None:
            self._record_stall(since, folder)
        elif flagged is not None:
            self._record_cleared(flagged)

    def _record_stall(self, since: float, folder: Path | None) -> None:
        self.stalled_step = self.clock.step
        with EventLog(self.files.events) as log:
            log.append(
                "stall",
                step=self.clock.step,
                since=since,
                timeout=self.clock.timeout,
                stacks=str(folder) if folder else None,
            )
        self._say(
            f"stalled: no step since step {self.clock.step} for {self._span(time.time() - since)}; "
            f"every rank's stack: jiyu stacks {self.run_id}"
        )

    def _record_cleared(self, since: float) -> None:
        """The step moved (or the call ended) after a stall: when, and how long it stood."""
        cleared = self.clock.moved if self.clock.moved is not None and self.clock.moved > since else time.time()
        step = getattr(self, "stalled_step", None)
        with EventLog(self.files.events) as log:
            log.append("stall", step=step, since=since, cleared=cleared, lasted=round(cleared - since, 3))
        clock = lambda t: time.strftime("%H:%M:%S", time.localtime(t))  # noqa: E731
        self._say(
            f"the stall at step {step} cleared after {self._span(cleared - since)} ({clock(since)} to {clock(cleared)})"
        )

    @staticmethod
    def _span(seconds: float) -> str:
        minutes, secs = divmod(int(seconds), 60)
        return f"{minutes} min {secs} s" if minutes else f"{secs} s"

    def _say(self, text: str) -> None:
        try:
            with open(self.files.log, "a") as f:
                f.write(f"[jiyu] {time.strftime('%H:%M:%S')} {text}\n")
        except OSError:
            pass  # the event log has it; a log that cannot be written loses only the line
