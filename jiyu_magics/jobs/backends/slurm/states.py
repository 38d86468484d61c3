"""Slurm's job states in the lifecycle's words: queued (with Slurm's reason), running, or
ended with the exit code the final-status rule reads and, where Slurm knows better than the
ranks why it ended, Slurm's own line.

A requeued job (its time limit near, or preempted on a partition that requeues) is pending
again with ``Restarts`` counting up: queued, not ended. TIMEOUT or PREEMPTED as a final state
means it could not be requeued: a failure, said in those words.
"""

from __future__ import annotations

from ....core.runs.model import RunStatus
from ...rank_placement import SchedulerState
from .commands import SlurmJobInfo
from .script import OUT_OF_REQUEUES_EXIT

QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING", "POWER_UP_NODE"}
RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
SUCCEEDED = "COMPLETED"
CANCELLED = "CANCELLED"
# final states whose cause Slurm knows better than any rank (a rank only sees itself killed)
FAILURE_LINES = {
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "out of memory (ask for more with --mem)",
    "BOOT_FAIL": "its nodes failed to boot",
    "DEADLINE": "its deadline passed",
    "TIMEOUT": "its time limit was reached before the ranks could checkpoint and requeue",
    "PREEMPTED": "it was preempted, and its partition does not requeue preempted jobs",
    "REVOKED": "it was revoked (a federated sibling ran it)",
}


def state_of(info: SlurmJobInfo, failed_nodes: list[str] | None = None) -> SchedulerState:
    """``failed_nodes``: the job's nodes that failed, as the caller found them (a NODE_FAIL's
    line names them)."""
    if info.state in QUEUED:
        return SchedulerState(RunStatus.QUEUED, _reason(info), started=None)
    if info.state in RUNNING:
        return SchedulerState(RunStatus.RUNNING, started=info.started)
    return SchedulerState.ended(
        _exit_code(info), cancelled=info.state == CANCELLED, started=info.started, error=_error(info, failed_nodes)
    )


def lost(job_id: str) -> SchedulerState:
    return SchedulerState(
        RunStatus.LOST,
        error=f"Slurm no longer knows job {job_id} and keeps no accounting of it: "
        "its end was never seen (check the run's log)",
    )


def _reason(info: SlurmJobInfo) -> str:
    reason = info.reason or info.state.lower()
    return f"{reason}, requeued {info.restarts}x" if info.restarts else reason


def _exit_code(info: SlurmJobInfo) -> int:
    """0 only for a job Slurm says COMPLETED; any other end is non-zero, whatever ExitCode
    says (a job cancelled while pending has ExitCode=0:0)."""
    if info.state == SUCCEEDED:
        return info.exit_code or 0
    return info.exit_code or 1


def _error(info: SlurmJobInfo, failed_nodes: list[str] | None = None) -> str | None:
    line = FAILURE_LINES.get(info.state)
    if line and failed_nodes:
        return f"Slurm job {info.job_id}: {line} ({info.state}): {', '.join(failed_nodes)}"
    if line:
        return f"Slurm job {info.job_id}: {line} ({info.state})"
    if info.exit_code == OUT_OF_REQUEUES_EXIT:
        return (
            f"Slurm job {info.job_id}: its time limit came {info.restarts + 1} time(s) and no requeue is "
            "left (--max-requeues); it checkpointed, resume it from its last checkpoint"
        )
    return None
