"""A Kubeflow job's status in the lifecycle's words.

``TrainJob`` (Trainer v2) says ``Complete`` or ``Failed`` in its conditions when it ends,
``Suspended`` while held (by Kueue, say), and counts ready child Jobs in ``jobsStatus`` while it
runs. ``PyTorchJob`` (training operator v1) says ``Created``, ``Running``, ``Restarting``,
``Succeeded``, ``Failed`` or ``Suspended``: its newest true condition is its state.
A job that is gone from the cluster was deleted by someone: a stop.
"""

from __future__ import annotations

import time

from ....core.runs.model import RunStatus
from ...rank_placement import SchedulerState


def state_of(kind: str, job: dict | None) -> SchedulerState:
    if job is None:
        return SchedulerState(RunStatus.STOPPED, error="its Kubernetes job was deleted")
    status = job.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    return (_trainjob if kind == "TrainJob" else _pytorchjob)(true, status)


def _trainjob(true: list[dict], status: dict) -> SchedulerState:
    types = {c.get("type"): c for c in true}
    if "Complete" in types:
        return SchedulerState.ended(0)
    if "Failed" in types:
        return _failed(types["Failed"])
    if "Suspended" in types:
        return SchedulerState(RunStatus.QUEUED, reason=_said(types["Suspended"]) or "suspended")
    if any((child.get("ready") or 0) > 0 for child in status.get("jobsStatus") or []):
        return SchedulerState(RunStatus.RUNNING, started=time.time())
    return SchedulerState(RunStatus.QUEUED, reason="pods starting" if status.get("jobsStatus") else "created")


def _pytorchjob(true: list[dict], status: dict) -> SchedulerState:
    latest = true[-1] if true else {}
    kind = latest.get("type")
    if kind == "Succeeded":
        return SchedulerState.ended(0)
    if kind == "Failed":
        return _failed(latest)
    if kind in ("Running", "Restarting"):
        return SchedulerState(RunStatus.RUNNING, started=time.time())
    return SchedulerState(RunStatus.QUEUED, reason=_said(latest) or (kind or "created").lower())


def _failed(condition: dict) -> SchedulerState:
    return SchedulerState.ended(1, error=f"Kubernetes: {_said(condition) or 'the job failed'}")


def _said(condition: dict) -> str | None:
    parts = [condition.get("reason"), condition.get("message")]
    return ": ".join(p for p in parts if p) or None
