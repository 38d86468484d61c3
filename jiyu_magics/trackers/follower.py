"""The follower: a run's event log into its trackers, outside the training loop.

``TrackerFollower(run_id, destinations)`` is a plain object its host calls: ``poll()`` reads
what the log gained since the offset each destination has seen, translates it and writes it
through the tracker's own library, flushed at once; ``close()`` reads the rest and ends the
tracker run with the run's status. Hosts call ``poll`` on their own clock (``FollowerThread``:
every 0.5 s, so a step reaches the tracker well within 2 s): a kernel thread for ``%%train
--nproc``, a thread of a job's supervisor, a process of its own (``python -m
jiyu_magics.trackers follow``) for an in-kernel ``fit`` and inside a Slurm allocation. Rank 0
appends events as it always does; nothing in the training loop knows a tracker is there.

Destinations may also come from the log: a ``start`` event names the ``--track`` of its
``%%train`` cell (a notebook job's cell, a rank of ``--nproc``), and the follower adds them
when it reads it. A tracker that fails (a server down) is retried with backoff and said once
per outage on stderr; it never stops the follower or the run.
"""

from __future__ import annotations

import copy
import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..core.events.log import START_MARKER, parse_lines, read_events
from ..core.runs.files import RunFiles
from ..core.runs.model import EventKind, RunStatus
from .destinations import Destination, TrackSpecError, parse_track
from .identity import RunIdentity, identify
from .sinks import Sink, open_sink
from .translate import Translator
from .where import record

POLL_S = 0.5  # the host's clock: a step is in the tracker within this plus one write
READ_LIMIT = 4 << 20  # bytes read per poll and destination: a long log is caught up in slices
RETRY_S = (1.0, 2.0, 5.0, 10.0, 30.0)
CLOSE_SLICES = 10_000  # READ_LIMIT each: a 40 GB log
CLOSE_WAIT_S = 60.0  # how long ``close`` waits for another follower of the run to finish
LOCK_FILE = "trackers.lock"
SCAN_LIMIT = 64 << 20  # bytes skimmed for start events per look


class Syncing:
    """One destination of one run: its sink, the offset it has seen, and its translator."""

    def __init__(self, destination: Destination, events: Path):
        self.destination, self.events = destination, events
        self.sink: Sink | None = None
        self.offset = 0
        self.translator = Translator()
        self.failures = 0
        self.retry_at = 0.0
        self.status: RunStatus | None = None
        self.written = 0  # events written by this follower (an export says how many)
        self.error: str | None = None  # this destination's last failure, until it is reachable again

    def open(self, identity: RunIdentity) -> None:
        self.sink = open_sink(self.destination, identity)
        try:  # where it went, for the run's dashboard and summary to say
            record(RunFiles(self.events.parent), self.destination, self.sink.place())
        except OSError:
            pass
        self.offset = self.sink.synced_offset()
        if self.offset:  # the translator's context (call, step) as of that offset
            seen, _ = read_events(self.events, 0, self.offset)
            self.translator.feed(seen)
            self.status = _last_status(seen)

    def sync(self) -> bool:
        """Writes what the log gained; True when it read to the log's end. A write that fails
        leaves everything as it was (the offset, the translator's place in the run's calls), so
        the next try writes the same events again, with what the log gained meanwhile."""
        events, offset = read_events(self.events, self.offset, READ_LIMIT)
        if offset == self.offset:
            return True
        before = copy.deepcopy(self.translator)
        translation = self.translator.feed(events)
        assert self.sink is not None, "open() first"
        try:
            self.sink.write(translation, offset)
        except BaseException:
            self.translator = before
            raise
        self.offset = offset
        self.written += len(events)
        if translation.status is not None:
            self.status = translation.status
        return False


class TrackerFollower:
    def __init__(
        self,
        run_id: str,
        destinations: Iterable[Destination] = (),
        events: Path | str | None = None,
        say: Callable[[str], None] | None = None,
        named_in_log: bool = True,
    ):
        """``named_in_log``: also the destinations the log's ``start`` events name (a live run's
        follower); an export writes only where it was asked to."""
        self.run_id = run_id
        self.named_in_log = named_in_log
        self.events = Path(events) if events is not None else RunFiles.of(run_id).events
        self.say = say or _say
        self.syncing: list[Syncing] = []
        self.identity: RunIdentity | None = None
        self._offset = 0  # how far the log was scanned for start events (their --track)
        self._said: set[str] = set()
        self._lock_fd: int | None = None
        for destination in destinations:
            self.add(destination)

    def add(self, destination: Destination) -> None:
        if all(s.destination != destination for s in self.syncing):
            self.syncing.append(Syncing(destination, self.events))

    @property
    def destinations(self) -> list[Destination]:
        return [s.destination for s in self.syncing]

    def poll(self) -> None:
        """One pass: new destinations named in the log, then each destination's new events."""
        self._scan_starts()
        if self.identity is None or not self._lock(wait=0):
            return  # no start yet (nothing to name a tracker run after), or another follower writes
        now = time.monotonic()
        for syncing in self.syncing:
            if now >= syncing.retry_at:
                self._sync(syncing)

    def close(self, status: RunStatus | str | None = None) -> None:
        """Reads the log to its end and ends each tracker run: with ``status`` (the owner's
        final word), else the log's last ``end``. A run with no ``start`` leaves no tracker run."""
        self._scan_starts()
        if self.identity is None:
            return
        if not self._lock(wait=CLOSE_WAIT_S):
            line = f"another follower of run {self.run_id} still writes its trackers; it ends them"
            for syncing in self.syncing:
                syncing.error = line
            self.say(f"jiyu: {line}")
            return
        for syncing in self.syncing:
            for _ in range(CLOSE_SLICES):  # to the log's end, slice by slice, unless the tracker fails
                if self._sync(syncing) or syncing.failures:
                    break
            if syncing.sink is None:
                continue
            final = RunStatus(status) if status is not None else syncing.status
            try:
                syncing.sink.finish(final)
            except Exception as error:  # noqa: BLE001 - a tracker's failure is said, never raised into the owner
                self._fail(syncing, error)
            finally:
                syncing.sink.close()
                syncing.sink = None
        self._unlock()

    def _lock(self, wait: float) -> bool:
        """The run's follower lock (``trackers.lock`` beside its log), held from the first write
        on: two followers of one run (a Slurm allocation's and its owner's last catch-up) take
        turns, each going on from the offset the tracker holds, and never write an event twice."""
        if self._lock_fd is not None:
            return True
        self.events.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.events.with_name(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.2)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _sync(self, syncing: Syncing) -> bool:
        """One slice of the log into one destination; True when it read to the log's end."""
        try:
            if syncing.sink is None:
                assert self.identity is not None, "a start event names the run first"
                syncing.open(self.identity)
            done = syncing.sync()
        except Exception as error:  # noqa: BLE001 - a tracker's failure is said, never raised into the owner
            self._fail(syncing, error)
            return False
        if syncing.failures:
            self.say(f"jiyu: {syncing.destination.label} reachable again; run {self.run_id} caught up")
            syncing.failures, syncing.error = 0, None
        return done

    def _fail(self, syncing: Syncing, error: Exception) -> None:
        syncing.error = _one_line(error)
        if syncing.failures == 0:
            self.say(f"jiyu: cannot write run {self.run_id} to {syncing.destination.label}: {syncing.error}")
        syncing.retry_at = time.monotonic() + RETRY_S[min(syncing.failures, len(RETRY_S) - 1)]
        syncing.failures += 1
        if isinstance(error, (ImportError, TrackSpecError)):
            syncing.retry_at = float("inf")  # a missing extra does not come back by waiting

    def _scan_starts(self) -> None:
        starts, self._offset = read_starts(self.events, self._offset)
        for event in starts:
            if self.identity is None:
                self.identity = identify(self.run_id, event)
            if not self.named_in_log:
                continue
            try:
                for destination in parse_track(event.get("track") or None):
                    self.add(destination)
            except TrackSpecError as error:
                self._say_once(str(error))

    def _say_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.say(f"jiyu: {line}")


class FollowerThread:
    """A follower polled on a daemon thread of its host (a kernel, a supervisor)."""

    def __init__(self, follower: TrackerFollower, every: float = POLL_S):
        self.follower, self.every = follower, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"jiyu-track-{follower.run_id}", daemon=True)

    def start(self) -> FollowerThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.follower.poll()

    def stop(self, status: RunStatus | str | None = None, timeout: float = 30.0) -> None:
        """Ends the polling, then the follower's ``close`` (the rest of the log, the status)."""
        self._stop.set()
        self._thread.join(timeout)
        self.follower.close(status)


def read_starts(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """The ``start`` events from byte ``offset`` on, and the offset to go on from: only lines
    holding a start are parsed, so skimming a 1 kHz log for them costs little."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(SCAN_LIMIT)
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    starts = [line for line in data[:end].splitlines() if START_MARKER in line]
    found = [event for event in parse_lines(starts) if event["kind"] == EventKind.START]
    return found, offset + end


def _last_status(events: list[dict]) -> RunStatus | None:
    for event in reversed(events):
        if event["kind"] == EventKind.START:
            return RunStatus.RUNNING
        if event["kind"] == EventKind.END:
            return RunStatus(event.get("status") or RunStatus.SUCCEEDED)
    return None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
