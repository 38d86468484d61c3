"""Which tracker run a jiyu run writes into, and what it is called there.

A run that resumes another's checkpoint (``%%train --resume last`` registers a new run; so
does a ``fit(resume=PATH)``) continues the tracker run of the run it resumed, and that one the
run it resumed, back to the first: the chain's *root*. TensorBoard keeps the root's folder,
MLflow the run tagged ``jiyu.run_id`` = root. The chain is read from the runs themselves
(each ``start`` event says ``resumed_from``), so nothing else has to remember it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.events.log import read_events
from ..core.runs.files import RunFiles, runs_root
from ..core.runs.model import EventKind
from ..core.store.database import StoreUnusable
from ..core.store.run_store import Run, RunStore, UnknownRun

MAX_CHAIN = 100  # a chain longer than this (or a loop, from hand-made folders) stops there


@dataclass
class RunIdentity:
    """A jiyu run as a tracker names and tags it."""

    run_id: str
    root: str  # the tracker run's key: the first run of the resume chain
    name: str
    kind: str | None = None
    notebook: str | None = None
    params: dict = field(default_factory=dict)  # the run record's (-p values, or a kernel run's fit options)
    started: float | None = None

    @property
    def tags(self) -> dict[str, str]:
        found = {"jiyu.run_id": self.root, "jiyu.name": self.name}
        found.update({k: v for k, v in (("jiyu.kind", self.kind), ("jiyu.notebook", self.notebook)) if v})
        return found


def identify(run_id: str, start: dict | None = None) -> RunIdentity:
    """The identity of ``run_id``, from its record (when the store has it) and its first
    ``start`` event (``start``, when the caller has it already)."""
    record = _record(run_id)
    start = start or first_start(run_id)
    name = (record.name if record else None) or (start or {}).get("name") or run_id  # a job's, not its first cell's
    return RunIdentity(
        run_id=run_id,
        root=root_of(run_id, start),
        name=name,
        kind=str(record.kind) if record else None,
        notebook=record.notebook if record else None,
        params=dict(record.params) if record else {},
        started=(start or {}).get("t") or (record.created if record else None),
    )


def root_of(run_id: str, start: dict | None = None) -> str:
    seen = [run_id]
    current = start if start is not None else first_start(run_id)
    while current and current.get("resumed_from") and len(seen) < MAX_CHAIN:
        parent = owner_of_checkpoint(current["resumed_from"], seen[-1], current.get("name"))
        if parent is None or parent in seen:
            break
        seen.append(parent)
        current = first_start(parent)
    return seen[-1]


def first_start(run_id: str) -> dict | None:
    """The run's first ``start`` event (its first call: what it resumed, if anything)."""
    events, _ = read_events(RunFiles.of(run_id).events, limit_bytes=1 << 20)
    return next((event for event in events if event["kind"] == EventKind.START), None)


def owner_of_checkpoint(path: str, current: str, name: str | None) -> str | None:
    """The run that wrote checkpoint ``path``: the run folder it lies in, else the run of
    the same name whose ``ckpt`` events recorded it (a ``--ckpt-dir`` outside JIYU_HOME)."""
    resolved = Path(os.path.abspath(path))
    try:
        relative = resolved.relative_to(Path(os.path.abspath(runs_root())))
    except ValueError:
        return _recorded_by(str(path), current, name)
    owner = relative.parts[0] if relative.parts else None
    return owner if owner and owner != current else None


def _recorded_by(path: str, current: str, name: str | None) -> str | None:
    try:
        runs = RunStore().list(annotate=False)
    except StoreUnusable:
        return None
    for run in runs:
        if run.id == current or (name and run.name != name):
            continue
        events, _ = read_events(RunFiles.of(run.id).events)
        if any(e["kind"] == EventKind.CKPT and e.get("path") == path for e in events):
            return run.id
    return None


def _record(run_id: str) -> Run | None:
    try:
        return RunStore().get(run_id)
    except (UnknownRun, StoreUnusable):
        return None
