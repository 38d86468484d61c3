"""Where a run's ranks run: the one part of the run lifecycle that differs between backends.

The lifecycle asks a placement to start the ranks and gets back a handle it can poll, stop and
ask for the first failing rank. Today there is one placement, a local child process group (the
kernel's ``%%train --nproc`` and the detached supervisor of ``%submit`` both use it). A
scheduler fits the same shape: its ``start`` submits, the handle's ``poll`` reads the
scheduler's state, and its ``stop`` cancels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Protocol

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

    def stop(self, grace: float = 10.0) -> StopResult:
        """SIGTERM to the rank processes, not to their launcher: each rank then ends its job
        by the one rule (``core.job_stop``: a checkpoint, no further cell, exit 0), wherever
        it runs. What is left after ``grace`` is killed. A scheduler's handle signals the
        ranks through the scheduler, then cancels."""

    def ranks(self) -> list[RankRecord]: ...
    def error_line(self) -> str | None: ...


class RankPlacement(Protocol):
    backend: str      # the run row's ``backend``

    def start(self, run_id: str, script: os.PathLike, spec: LaunchSpec, *, cwd: str | None,
              env: Mapping[str, str] | None) -> RankHandle: ...


@dataclass
class LocalProcessGroup:
    """torchrun as a child process group of the owner, on this machine. ``die_with_parent``
    asks Linux to SIGTERM torchrun when the owner dies (a ``kill -9`` of the supervisor or of
    the kernel's process group), and the ranks die with torchrun. None: when the owner runs in
    a main thread (the supervisor, a kernel's cells), since the signal follows the thread that
    started torchrun."""

    die_with_parent: bool | None = None
    backend: str = "local"

    def start(self, run_id: str, script: os.PathLike, spec: LaunchSpec, *, cwd: str | None,
              env: Mapping[str, str] | None) -> Launch:
        return Launch.start(script, nproc=spec.nproc, run_id=run_id, cwd=cwd, env=env, nnodes=spec.nnodes,
                            rdzv_endpoint=spec.rdzv_endpoint, node_rank=spec.node_rank,
                            max_restarts=spec.max_restarts, die_with_parent=self.die_with_parent)
