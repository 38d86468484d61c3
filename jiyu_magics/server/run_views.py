"""Runs as REST, the panel and ``/metrics`` show them: the store's row plus its progress.

The progress comes from the run's event log through ``core.event_log.summarize``; a summary is
kept while the log's size and modification time stay the same, so polling fifty finished runs
reads no log twice. Every method blocks (SQLite, files): handlers call them on a worker thread.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..core.event_log import read_events, summarize
from ..core.run_files import RunFiles, store_path
from ..core.run_store import Run, RunStore
from . import jobs_bridge as bridge


class RunViews:
    def __init__(self, home: Path | None = None, limit: int = 50):
        self.home = home
        self.limit = limit
        self.store = RunStore(store_path(home))
        self._summaries: dict[str, tuple[tuple[int, int], dict]] = {}
        self._lock = threading.Lock()

    def files(self, run_id: str) -> RunFiles:
        return RunFiles.of(run_id, self.home)

    def list(self) -> list[dict]:
        """The most recent runs, newest first; runs whose process died are marked ``lost``, runs
        a scheduler holds are brought up to date with it."""
        bridge.follow_scheduled(self.store)
        return [self.record(run) for run in self.store.list(limit=self.limit)]

    def status_counts(self) -> dict[str, int]:
        """Runs per status, after the reconciliation ``list`` did (no second pass)."""
        return self.store.count_by_status()

    def row(self, run_id: str) -> Run:
        """The store's row alone (a log poll needs its status, not a progress summary)."""
        run = self.store.get(run_id)
        bridge.follow_scheduled(self.store, [run])
        return self.store.get(run_id)

    def get(self, run_id: str) -> dict:
        """One run; raises ``UnknownRun`` (a 404) for an id that is not in the store."""
        self.store.reconcile()
        return self.record(self.row(run_id))

    def record(self, run: Run) -> dict:
        return {**run.to_dict(), "summary": self.summary(run.id)}

    def summary(self, run_id: str) -> dict:
        path = self.files(run_id).events
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
            self._summaries[run_id] = (key, summary)
        return summary

    def events(self, run_id: str, offset: int, limit_bytes: int) -> dict:
        self.store.get(run_id)
        events, new_offset = read_events(self.files(run_id).events, offset, limit_bytes)
        return {"events": events, "offset": new_offset}
