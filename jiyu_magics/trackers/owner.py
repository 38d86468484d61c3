"""What a run's lifecycle owner (``jobs.lifecycle``: the kernel of ``%%train --nproc``, a job's
supervisor, whoever follows a scheduled run) does for its trackers: three calls.

- ``RunTracking(run_id, track)``: the destinations the launch named (``--track`` of ``%%train
  --nproc``, ``%submit``...).
- ``check()`` from the owner's follow loop (cheap: at most once a second, it reads only the
  ``start`` lines the log gained): starts the follower process as soon as the run has a
  destination, from the launch or from a ``start`` event (a notebook job's ``%%train --track``
  cell, ``$JIYU_TRACK`` in the ranks). A run that tracks nothing starts no process.
- ``finish()`` once the owner recorded the end: the follower reads the rest and ends the
  tracker runs with the run's status. A scheduled run's follower ran inside its allocation
  (the batch script starts it); the owner that sees the end starts one more, which brings the
  tracker up to the recorded end (a job cancelled in the queue, a node lost) and exits.

The follower is a process of its own (``follow_process``) so the owner, often a kernel, never
imports a tracker; both hosts write under the run's follower lock, so they never write the same
events twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from ..core.runs.files import RunFiles
from .destinations import Destination, TrackSpecError, parse_track
from .follow_process import FollowerProcess
from .follower import read_starts

CHECK_S = 1.0


class RunTracking:
    def __init__(self, run_id: str, track: Iterable[str | Destination] = (), wait_s: float = 0.0):
        """``wait_s``: how long ``finish`` waits for the follower (a kernel's cell: what the
        follower says about the run's end shows there); a detached owner does not wait."""
        self.run_id = run_id
        self.wait_s = wait_s
        self.destinations = parse_track([str(d) for d in track])
        self.follower: FollowerProcess | None = None
        self.offset = 0
        self._next = 0.0

    def check(self) -> None:
        """Starts the follower once there is something to follow (at most every ``CHECK_S``)."""
        if self.follower is not None or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + CHECK_S
        self._scan()
        if self.destinations:
            self.follower = FollowerProcess.start(self.run_id, self.destinations)

    def finish(self, scheduled: bool = False) -> None:
        if self.follower is None and scheduled:
            self._scan()
            if self.destinations:  # its pipe closes below: it catches up to the recorded end and ends
                self.follower = FollowerProcess.start(self.run_id, self.destinations)
        if self.follower is not None:
            self.follower.done(wait_s=self.wait_s)

    def _scan(self) -> None:
        found, self.offset = named_in_log(RunFiles.of(self.run_id).events, self.offset)
        self.destinations += [d for d in found if d not in self.destinations]


def named_in_log(path: Path, offset: int = 0) -> tuple[list[Destination], int]:
    """The destinations the ``start`` events from ``offset`` name, and the offset to go on from."""
    starts, offset = read_starts(path, offset)
    found: list[Destination] = []
    for start in starts:
        try:
            found += [d for d in parse_track(start.get("track") or None) if d not in found]
        except TrackSpecError:
            continue  # the follower says it; the owner just does not follow it
    return found, offset
