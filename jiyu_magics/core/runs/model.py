"""The words of a run, as enums: what kind of run it is, its status, and the kinds of event its
log holds.

They are string-valued (``RunStatus.FAILED == "failed"``), so SQLite rows, JSON event lines,
REST replies and the panel's TypeScript keep the plain strings they always had, while Python
code names each value once.
"""

from __future__ import annotations

from enum import Enum


class _Word(str, Enum):
    def __str__(self) -> str:  # the value, in f-strings, SQL and JSON alike
        return str.__str__(self)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class RunStatus(_Word):
    """A run's state; the moves between them are ``states.TRANSITIONS``."""

    QUEUED = "queued"  # registered, waiting to start (for GPUs, a CPU slot, or its scheduler)
    STARTING = "starting"  # its placement is starting the ranks (torchrun, sbatch)
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was asked for: the ranks checkpoint and exit
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"  # ended by a stop request (checkpointed when it could)
    LOST = "lost"  # its process vanished without reporting (kill -9, reboot)

    @property
    def active(self) -> bool:
        return self in ACTIVE

    @property
    def final(self) -> bool:
        return self not in ACTIVE


ACTIVE = (RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING)
# How a training call can end, as its ``end`` event says (the engine never says lost or queued).
END_STATUSES = (RunStatus.SUCCEEDED, RunStatus.STOPPED, RunStatus.FAILED)


class RankState(_Word):
    """A rank of a launched run, as its record and the process table tell (``RankRecord.state``)."""

    RUNNING = "running"  # its process lives and has not written its end
    EXITED = "exited"  # it wrote its end: an exit code (0 when it finished or stopped) and its error
    KILLED = "killed"  # gone without writing its end: a signal or ``os._exit``


class RunKind(_Word):
    KERNEL = "kernel"  # fit()/%%train inside a notebook kernel
    DDP = "ddp"  # %%train --nproc from a kernel, or a bare torchrun of a script
    JOB = "job"  # %submit / jiyu submit: a notebook under a detached supervisor
    RANKS = "ranks"  # %ranks start: torchrun workers kept across cells, driven by a kernel


class EventKind(_Word):
    START = "start"  # one per fit call; a run may hold several
    STEP = "step"
    VAL = "val"
    VAL_PROGRESS = "val_progress"  # validation moves (a heartbeat at the log interval): not a stall
    CKPT = "ckpt"
    GPU = "gpu"
    ADVICE = "advice"
    STALL = "stall"
    END = "end"
    ERROR = "error"
