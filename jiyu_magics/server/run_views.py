"""Runs as REST, the panel and ``/metrics`` show them: the store's row plus its progress.

A finished run's progress is the summary the store kept when it ended (no log read at all);
a running one's comes from its event log through ``core.event_log.summarize``, kept while the
log's size and modification time stay the same, so a poll reads no unchanged log twice. The
list carries each run's ``params`` in short form (``brief_params``: a value over
``BRIEF_VALUE_CHARS`` of JSON becomes its size, at most ``BRIEF_KEYS`` names; the run's own route
has them whole): enough for the panel to show which parameters differ between runs of one name,
while a poll stays small whatever a submission gave. Every method blocks (SQLite, files):
handlers call them on a worker thread.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TypedDict

from ..core.events import checkpoints as run_checkpoints
from ..core.events.checkpoints import RunCheckpoint
from ..core.events.fold import RunSummary
from ..core.events.log import Events, read_events, summarize
from ..core.runs import stack_groups
from ..core.runs.files import RunFiles, store_path
from ..core.runs.line_map import LineMap
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from ..views.run_record import RunRecord, run_record
from ..views.stack_view import StackGroupJson, as_json

BRIEF_VALUE_CHARS = 80
BRIEF_KEYS = 32


class RunList(TypedDict):
    """``GET /jiyu/api/runs``: the newest runs, newest first, each with its params in short form."""

    runs: list[RunRecord]


class EventChunk(TypedDict):
    """``GET /jiyu/api/runs/{id}/events``: the events after the offset asked for, and the
    offset to ask from next."""

    events: Events
    offset: int


class StackDump(TypedDict):
    """``GET /jiyu/api/runs/{id}/stacks``: a run's newest stack dump, grouped by identical
    stacks; ``dumped`` (its folder's name) null and no groups when none was taken."""

    run_id: str
    dumped: str | None
    groups: list[StackGroupJson]


class RunCheckpoints(TypedDict):
    """``GET /jiyu/api/runs/{id}/checkpoints``: the checkpoints on disk, oldest first."""

    run_id: str
    checkpoints: list[RunCheckpoint]
    rotated: int  # recorded by the run, gone since (--keep-ckpts rotated them out, or deleted)


def brief_params(params: dict) -> dict:
    """Each parameter as listed: itself when its JSON is short, else a note of its size."""
    brief = {}
    for name in sorted(params)[:BRIEF_KEYS]:
        text = json.dumps(params[name], default=str)
        brief[name] = params[name] if len(text) <= BRIEF_VALUE_CHARS else f"<{len(text)} characters>"
    return brief


class RunViews:
    def __init__(self, home: Path | None = None, limit: int = 50):
        self.home = home
        self.limit = limit
        self.store = RunStore(store_path(home))
        self._summaries: dict[str, tuple[tuple[int, int], RunSummary]] = {}
        self._events: dict[str, Path] = {}  # each run's event log path, worked out once
        self._lock = threading.Lock()

    def files(self, run_id: str) -> RunFiles:
        return RunFiles.of(run_id, self.home)

    def list(self, limit: int | None = None, since: float | None = None) -> list[RunRecord]:
        """The ``limit`` (default ``self.limit``) most recent runs created at or after ``since``,
        newest first, with their params in short form, as readers show them (a run whose
        processes died is ``lost``). Writes nothing, like every method here."""
        runs = self.store.list(limit=limit or self.limit, since=since)
        return [self.record(run, brief_params(run.params)) for run in runs]

    def stacks(self, run_id: str) -> StackDump:
        """The newest stack dump of a run, grouped (``core.stack_groups``); raises for an unknown run."""
        run = self.store.get(run_id)
        folders = stack_groups.dump_folders(run.id)
        groups = stack_groups.group(stack_groups.read_dump(folders[-1])) if folders else []
        line_map = LineMap.read(self.files(run.id).line_map)
        return StackDump(run_id=run.id, dumped=folders[-1].name if folders else None, groups=as_json(groups, line_map))

    def checkpoints(self, run_id: str) -> RunCheckpoints:
        """The run's checkpoints that exist on disk, and how many it recorded that are gone
        (``--keep-ckpts`` rotated them out); raises for an unknown run."""
        run = self.store.get(run_id)
        found = run_checkpoints.on_disk(self.files(run.id).events)
        return RunCheckpoints(run_id=run.id, checkpoints=found.kept, rotated=found.rotated)

    def gpu_seconds(self) -> dict[str, tuple[float, float]]:
        """Per GPU uuid: seconds runs or kernels held it, and of those idle (``core.gpu_usage``), in all."""
        with self.store.db.read() as db:
            rows = db.execute("SELECT uuid, SUM(held_s), SUM(idle_s) FROM gpu_usage GROUP BY uuid").fetchall()
        return {uuid: (float(held or 0), float(idle or 0)) for uuid, held, idle in rows}

    def status_counts(self) -> dict[str, int]:
        """Runs per status, as readers show them (``lost`` derived)."""
        return self.store.count_by_status()

    def row(self, run_id: str) -> Run:
        """The store's row alone (a log poll needs its status, not a progress summary)."""
        return self.store.get(run_id)

    def get(self, run_id: str) -> RunRecord:
        """One run, with its parameters whole; raises ``UnknownRun`` (a 404) for an id that is
        not in the store."""
        run = self.row(run_id)
        return self.record(run, run.params)

    def record(self, run: Run, params: dict | None = None) -> RunRecord:
        """The client's record of a run (``views.run_record``), with its progress summary."""
        summary = run.summary if run.summary is not None else self.summary(run.id)
        return run_record(run, summary, params)

    def summary(self, run_id: str) -> RunSummary:
        path = self._events.get(run_id) or self._events.setdefault(run_id, self.files(run_id).events)
        try:
            stat = path.stat()
            key = (stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            key = (-1, -1)
        with self._lock:
            cached = self._summaries.get(run_id)
        if cached and cached[0] == key:
            return cached[1]
        summary = summarize(path)
        with self._lock:
            if len(self._summaries) > 4 * self.limit:
                self._summaries.clear()
                self._events.clear()
            self._summaries[run_id] = (key, summary)
        return summary

    def events(self, run_id: str, offset: int, limit_bytes: int) -> EventChunk:
        self.store.get(run_id)
        events, new_offset = read_events(self.files(run_id).events, offset, limit_bytes)
        return EventChunk(events=events, offset=new_offset)
