"""Where a run's ranks run: the one part of the run lifecycle that differs between backends.

The lifecycle asks a placement for a place (``reserve``: None while the run must wait in
``queued``), then to start the ranks there, and gets back a handle it can poll, stop and ask for
the first failing rank. A local child process group (the kernel's ``%%train --nproc`` and the
detached supervisor of ``%submit``) takes its place from the run store's GPU queue
(``gpu_queue``), and its ranks see exactly the leased GPUs. A scheduler
(``backends/slurm_placement``, ``backends/kubernetes_placement``) fits the same shape: its
``reserve`` grants at once (the scheduler queues), its ``start`` submits, its handle's ``state``
reads the scheduler's state, and its ``stop`` cancels; nobody waits on it, so its placement can
``attach`` to the job again from the run row whenever someone asks how the run is doing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from ..core.runs.model import RunStatus
from ..core.store.run_row import Run
from .gpu_queue import GpuQueue, Grant
from .launch_spec import LaunchSpec
from .process.process_tree import StopResult
from .process.rank_records import RankRecord
from .process.torchrun_launch import Launch


class RankHandle(Protocol):
    """Running ranks, as the lifecycle follows them."""

    @property
    def pid(self) -> int | None:
        """The process that stands for the ranks (torchrun); None where a scheduler holds them."""

    @property
    def pgid(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int | None: ...

    def stop(self, grace: float = 10.0) -> StopResult:
        """SIGTERM to the rank processes, not to their launcher: each rank then ends its job
        by the one rule (``core.job_stop``: a checkpoint, no further cell, exit 0), wherever
        it runs. What is left after ``grace`` is killed. A scheduler's handle signals the
        ranks through the scheduler, then cancels."""

    def ranks(self) -> list[RankRecord]: ...
    def error_line(self) -> str | None: ...


class SchedulerUnreachable(Exception):
    """The scheduler cannot be asked now (not configured on this machine, its controller
    down): the run stays as recorded, to be asked again later."""


@dataclass(frozen=True)
class SchedulerState:
    """A scheduled job as its scheduler sees it now, in the run's own words (``RunStatus``):
    ``queued`` while it holds the job pending (held, requeued, nodes booting), ``running``, and
    once it ended ``succeeded`` (it completed), ``failed``, ``stopped`` (someone cancelled it
    there: a stop request) or ``lost`` (it no longer knows the job and never told its end). The
    run's final status is still the one rule's (``final_status``), which reads ``exit_code``."""

    status: RunStatus
    reason: str | None = None  # why it is queued, in the scheduler's words (Resources, Priority)
    exit_code: int | None = None  # once ended: the code the final-status rule reads (0: it completed)
    started: float | None = None  # when it started running, if it did
    error: str | None = None  # the scheduler's own line for a failure (a node failed, out of memory)

    @classmethod
    def ended(
        cls, exit_code: int | None, *, cancelled: bool = False, started: float | None = None, error: str | None = None
    ) -> SchedulerState:
        status = RunStatus.STOPPED if cancelled else RunStatus.SUCCEEDED if exit_code == 0 else RunStatus.FAILED
        return cls(status, exit_code=exit_code, started=started, error=error)

    @property
    def over(self) -> bool:
        return self.status.final

    @property
    def cancelled(self) -> bool:
        return self.status is RunStatus.STOPPED

    @property
    def lost(self) -> bool:
        return self.status is RunStatus.LOST


class ProcessHandle(RankHandle, Protocol):
    """Ranks under a process of ours (torchrun, ``Launch``): followed by waiting on it."""

    @property
    def pid(self) -> int: ...


class ScheduledHandle(RankHandle, Protocol):
    """A job a scheduler holds: followed by asking, not by waiting."""

    scheduler_id: str | None  # the scheduler's name for it (Slurm job id); None: not submitted

    def state(self) -> SchedulerState: ...


class _Placement(Protocol):
    backend: str  # the run row's ``backend``

    def reserve(self, run_id: str) -> Grant | None: ...
    def wait_hint(self, run_id: str) -> tuple[float, str]: ...


class ProcessPlacement(_Placement, Protocol):
    """Ranks under a process of the owner's (``LocalProcessGroup``)."""

    @property
    def scheduled(self) -> Literal[False]: ...

    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        grant: Grant | None = None,
    ) -> ProcessHandle: ...


class SchedulerGrantsAtOnce:
    """For a scheduler's placement: the scheduler keeps its own queue (Slurm's PENDING, a
    Kubernetes job's pods waiting for nodes), so the lifecycle never waits for a place here."""

    def reserve(self, run_id: str) -> Grant | None:
        return Grant()

    def wait_hint(self, run_id: str) -> tuple[float, str]:
        return 0.0, "the scheduler queues it"


class ScheduledPlacement(_Placement, Protocol):
    """Ranks a scheduler holds: the lifecycle follows them with ``attach`` + ``state``."""

    @property
    def scheduled(self) -> Literal[True]: ...

    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        grant: Grant | None = None,
    ) -> ScheduledHandle: ...

    def attach(self, run: Run) -> ScheduledHandle:
        """The handle of the job the run row names (``scheduler_id``), to ask or stop it."""
        ...


# ``placement.scheduled`` tells the two apart (mypy narrows the union on it)
RankPlacement = ProcessPlacement | ScheduledPlacement


@dataclass
class LocalProcessGroup:
    """torchrun as a child process group of the owner, on this machine. ``die_with_parent``
    asks Linux to SIGKILL torchrun when the owner dies (a ``kill -9`` of the supervisor or of
    the kernel's process group), and the ranks stop with a checkpoint as torchrun dies. None:
    when the owner runs in a main thread (the supervisor, a kernel's cells), since the signal
    follows the thread that started torchrun."""

    die_with_parent: bool | None = None
    backend: str = "local"
    scheduled: Literal[False] = False

    def reserve(self, run_id: str) -> Grant | None:
        """GPU leases from the store's queue, when it is the run's turn and enough are free."""
        return self._queue.try_place(run_id)

    def wait_hint(self, run_id: str) -> tuple[float, str]:
        """How long to wait before asking again (after what the last ``reserve`` met), and the
        line that says why the run waits."""
        return self._queue.poll_interval(run_id), self._queue.waiting_line(run_id)

    @functools.cached_property
    def _queue(self) -> GpuQueue:
        """One queue for the owner's whole wait, made at its first look (the store it opens is
        the owner's, whose environment is set by then)."""
        return GpuQueue()

    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        grant: Grant | None = None,
    ) -> Launch:
        env = {**(env or {}), **(grant.env() if grant is not None else {})}
        return Launch.start(
            script,
            nproc=spec.nproc,
            run_id=run_id,
            cwd=cwd,
            env=env,
            nnodes=spec.nnodes,
            rdzv_endpoint=spec.rdzv_endpoint,
            node_rank=spec.node_rank,
            max_restarts=spec.max_restarts,
            die_with_parent=self.die_with_parent,
        )
