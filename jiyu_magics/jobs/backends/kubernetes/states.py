"""A Kubeflow job's status in the lifecycle's words.

``TrainJob`` (Trainer v2) says ``Complete`` or ``Failed`` in its conditions when it ends,
``Suspended`` while held (by Kueue, say), and counts ready child Jobs in ``jobsStatus`` while it
runs. ``PyTorchJob`` (training operator v1) says ``Created``, ``Running``, ``Restarting``,
``Succeeded``, ``Failed`` or ``Suspended``: its newest true condition is its state.
A job that is gone from the cluster was deleted by someone: a stop.
"""

from __future__ import annotations

import time

from ...rank_placement import Phase, SchedulerState


def state_of(kind: str, job: dict | None) -> SchedulerState:
    if job is None:
        return SchedulerState(Phase.ENDED, cancelled=True, error="its Kubernetes job was deleted")
    status = job.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    return (_trainjob if kind == "TrainJob" else _pytorchjob)(true, status)


def _trainjob(true: list[dict], status: dict) -> SchedulerState:
    types = {c.get("type"): c for c in true}
    if "Complete" in types:
        return SchedulerState(Phase.ENDED, exit_code=0)
    if "Failed" in types:
        return _failed(types["Failed"])
    if "Suspended" in types:
        return SchedulerState(Phase.QUEUED, reason=_said(types["Suspended"]) or "suspended")
    if any((child.get("ready") or 0) > 0 for child in status.get("jobsStatus") or []):
        return SchedulerState(Phase.RUNNING, started=time.time())
    return SchedulerState(Phase.QUEUED, reason="pods starting" if status.get("jobsStatus") else "created")


def _pytorchjob(true: list[dict], status: dict) -> SchedulerState:
    latest = true[-1] if true else {}
    kind = latest.get("type")
    if kind == "Succeeded":
        return SchedulerState(Phase.ENDED, exit_code=0)
    if kind == "Failed":
        return _failed(latest)
    if kind in ("Running", "Restarting"):
        return SchedulerState(Phase.RUNNING, started=time.time())
    return SchedulerState(Phase.QUEUED, reason=_said(latest) or (kind or "created").lower())


def _failed(condition: dict) -> SchedulerState:
    return SchedulerState(Phase.ENDED, exit_code=1, error=f"Kubernetes: {_said(condition) or 'the job failed'}")


def _said(condition: dict) -> str | None:
    parts = [condition.get("reason"), condition.get("message")]
    return ": ".join(p for p in parts if p) or None
