"""Where a run's ranks run: the one part of the run lifecycle that differs between backends.

The lifecycle asks a placement for a place (``reserve``: None while the run must wait in
``queued``), then to start the ranks there, and gets back a handle it can poll, stop and ask for
the first failing rank. Today there is one placement, a local child process group (the kernel's
``%%train --nproc`` and the detached supervisor of ``%submit`` both use it): its place is a GPU
lease from the run store's queue (``gpu_queue``), and its ranks see exactly the leased GPUs. A
scheduler fits the same shape: its ``reserve`` grants at once (the scheduler queues), its
``start`` submits, the handle's ``poll`` reads the scheduler's state, and its ``stop`` cancels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Protocol

from .gpu_queue import Grant, GpuQueue
from .launch_spec import LaunchSpec
from .process.process_tree import StopResult
from .process.rank_records import RankRecord
from .process.torchrun_launch import Launch


class RankHandle(Protocol):
    """Running ranks, as the lifecycle follows them."""

    pid: int          # the process that stands for the ranks (torchrun here)
    pgid: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def stop(self, grace: float = 10.0) -> StopResult: ...
    def ranks(self) -> list[RankRecord]: ...
    def error_line(self) -> str | None: ...


class RankPlacement(Protocol):
    backend: str      # the run row's ``backend``

    def reserve(self, run_id: str) -> Grant | None: ...
    def wait_hint(self, run_id: str) -> tuple[float, str]: ...
    def start(self, run_id: str, script: os.PathLike, spec: LaunchSpec, *, cwd: str | None,
              env: Mapping[str, str] | None, grant: Grant | None = None) -> RankHandle: ...


@dataclass
class LocalProcessGroup:
    """torchrun as a child process group of the owner, on this machine. ``die_with_parent``
    asks Linux to SIGTERM torchrun when the owner dies; only a single-threaded owner may ask
    (the supervisor, not a kernel), since the signal follows the thread that started it."""

    die_with_parent: bool = False
    backend: str = "local"

    def reserve(self, run_id: str) -> Grant | None:
        """GPU leases from the store's queue, when it is the run's turn and enough are free."""
        return GpuQueue().try_place(run_id)

    def wait_hint(self, run_id: str) -> tuple[float, str]:
        """How long to wait before asking again, and the line that says why the run waits."""
        queue = GpuQueue()
        return queue.poll_interval(run_id), queue.waiting_line(run_id)

    def start(self, run_id: str, script: os.PathLike, spec: LaunchSpec, *, cwd: str | None,
              env: Mapping[str, str] | None, grant: Grant | None = None) -> Launch:
        env = {**(env or {}), **(grant.env() if grant is not None else {})}
        return Launch.start(script, nproc=spec.nproc, run_id=run_id, cwd=cwd, env=env, nnodes=spec.nnodes,
                            rdzv_endpoint=spec.rdzv_endpoint, node_rank=spec.node_rank,
                            max_restarts=spec.max_restarts, die_with_parent=self.die_with_parent)
