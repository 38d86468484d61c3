"""A run as clients see it: the REST API (``/jiyu/api/runs``), the JupyterLab panel and the
``--json`` of ``jiyu jobs``/``jiyu queue``. It is what the panel shows, built from the stored
row and the run's state, and nothing of the store's own bookkeeping (pids and their start times,
the owner, the queue rank, when a scheduler was polled): those stay private to the store, so
the store can change them without breaking a client.

The JSON Schema of the REST API is generated from this type (``server.rest_schema``), and the
panel's TypeScript types from that schema (``labextension/src/api.generated.ts``).
"""

from __future__ import annotations

from typing import Any, TypedDict

from ..core.events.fold import RunSummary, complete
from ..core.runs.model import RunKind, RunStatus
from ..core.store.run_row import Run, RunGpu
from .run_table import progress_of


class _AlwaysSent(TypedDict):
    """The keys of every run record (``null`` for "not known")."""

    id: str
    name: str
    kind: RunKind
    status: RunStatus
    derived: bool  # the status was worked out when read (lost: its processes are gone), not yet recorded
    backend: str  # local, slurm or kubernetes
    scheduler_id: str | None  # the scheduler's name for the job (Slurm job id, Kubernetes kind/name)
    nproc: int
    nnodes: int
    notebook: str | None
    host: str
    created: float
    started: float | None
    ended: float | None
    duration: float | None  # seconds from its start to its end, or to now while it runs
    exit_code: int | None
    error: str | None  # the first failing rank's line, or where it stopped
    stop_requested: bool
    stalled_since: float | None  # while running: when its step last moved, flagged stalled since
    gpus_requested: int | None  # GPUs it waits for or leased (0: a CPU job; null: it never queues)
    gpus: list[RunGpu]  # the GPUs it holds (live leases) or held
    queue_position: int | None  # 1-based while queued
    queue_reason: str | None  # why it waits, in the words of whoever holds it (Slurm: Resources)
    priority: int
    share: bool
    summary: RunSummary  # its progress, folded from its event log


class RunRecord(_AlwaysSent, total=False):
    """One run for a client. Every key is always sent (``null`` for "not known") except
    ``params``: the runs list leaves parameters out, the run's own route sends them."""

    params: dict[str, Any]  # its -p parameters


def cli_record(run: Run) -> RunRecord:
    """The record ``--json`` prints: with its parameters whole and its progress."""
    return run_record(run, progress_of(run), run.params)


def run_record(run: Run, summary: RunSummary, params: dict[str, Any] | None = None) -> RunRecord:
    """The record of ``run``; ``params`` left out when None (the runs list sends none)."""
    record = RunRecord(
        id=run.id,
        name=run.name,
        kind=run.kind,
        status=run.status,
        derived=run.derived,
        backend=run.backend,
        scheduler_id=run.scheduler_id,
        nproc=run.nproc,
        nnodes=run.nnodes,
        notebook=run.notebook,
        host=run.host,
        created=run.created,
        started=run.started,
        ended=run.ended,
        duration=run.duration,
        exit_code=run.exit_code,
        error=run.error,
        stop_requested=run.stop_requested,
        stalled_since=run.stalled_since,
        gpus_requested=run.gpus_requested,
        gpus=run.gpus,
        queue_position=run.queue_position,
        queue_reason=run.queue_reason,
        priority=run.priority,
        share=run.share,
        summary=complete(summary),
    )
    if params is not None:
        record["params"] = params
    return record
