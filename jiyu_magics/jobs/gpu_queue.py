"""A queued run's turn: what its owner asks the store each time it checks whether the run may
start, and what the ranks then see.

The owner (a job's supervisor, a kernel's ``%%train --nproc``) calls ``try_place`` until it
returns a ``Grant``. Each call first lets the store record ``lost`` the runs whose owner died
(``RunStore.record_lost``, every few seconds: their leases end with them, so the queue moves
on), then, only when the run is first in line, reads
the GPUs through NVML and asks the store for leases on the usable ones (see
``core.gpu_leases`` for the rules). The ranks get ``CUDA_VISIBLE_DEVICES`` set to exactly the
leased GPUs (by UUID, so CUDA's own enumeration order cannot map ``cuda:N`` elsewhere); a run
that wants no GPU gets an empty one on a machine that has GPUs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.box.client import BoxUnreachable
from ..core.gpu import snapshot as gpu
from ..core.gpu.owners import Attribution
from ..core.runs.model import RunStatus
from ..core.settings import CPU_JOBS_ENV as CPU_LIMIT_ENV
from ..core.settings import Settings
from ..core.store.leases import Lease
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from .gpu_holders import holders_line
from .job_error import JobError

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
HEAD_POLL_S = 0.2  # how often the first run in line checks for GPUs
WAIT_POLL_S = 1.0  # how often the others check whether they moved up
BOX_POLL_S = 0.02  # on a box the keeper waits with the answer (up to a second): ask again at once
KEEPER_OUT_POLL_S = 1.0  # a keeper that does not answer holds nothing back: asked again each second


@dataclass
class Grant:
    """What a run got: its leases and the ranks' ``CUDA_VISIBLE_DEVICES`` (None: leave the
    variable as it is, on a machine without GPUs)."""

    leases: list[Lease] = field(default_factory=list)
    visible_devices: str | None = None

    def env(self) -> dict[str, str]:
        return {} if self.visible_devices is None else {VISIBLE_ENV: self.visible_devices}

    def describe(self) -> str:
        if not self.leases:
            return "no GPU"
        return "GPU " + ",".join(str(lease.index) for lease in self.leases)


def cpu_job_limit(env=None) -> int | None:
    """``JIYU_MAX_CPU_JOBS``: how many runs that want no GPU may run at once (unset: no limit)."""
    raw = Settings.from_environ(env).max_cpu_jobs
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise JobError(f"{CPU_LIMIT_ENV}={raw!r}: expected a whole number >= 1")
    return int(raw)


class GpuQueue:
    def __init__(self, store: RunStore | None = None, own_pids: Iterable[int] = ()):
        self.store = store or RunStore()
        self.own_pids = {os.getpid(), *own_pids}
        self.keeper_out = False  # the last try met a box's keeper that did not answer

    def try_place(self, run_id: str) -> Grant | None:
        """The run's grant if it may start now, else None (not its turn, or too few GPUs)."""
        self.store.record_lost()  # a queued run's owner writes: dead runs end, their GPUs with them
        active = [r for r in self.store.list(include_finished=False, annotate=False) if r.active]
        run = next((r for r in active if r.id == run_id), None)
        if run is None or run.status != RunStatus.QUEUED:
            return None
        if run.gpus_requested is None:
            return Grant()
        if run.gpus_requested == 0:
            return self._admit_cpu(run)
        try:
            grant = self._lease(run, active)
        except BoxUnreachable as problem:  # the box's keeper is down: the run waits, nothing is lost
            self.keeper_out = True
            self._note(run, str(problem))
            return None
        self.keeper_out = False
        return grant

    def _lease(self, run: Run, active: list[Run]) -> Grant | None:
        turn = self.store.leases.turn(run.id)
        if not turn.head:
            if turn.reason is not None:  # a box's rule says why (its per-user limit, fair share)
                self._note(run, turn.reason)
            return None
        snap = gpu.snapshot()
        slots = Attribution(active, self.store.leases.live(), own_pids=self.own_pids).usable(snap)
        leases = self.store.leases.acquire(run.id, slots)
        if leases:
            self._note(run, None)
            return Grant(leases, ",".join(lease.uuid for lease in leases))
        said = self.store.leases.last_turn
        holders = holders_line(snap, slots, self.own_pids)
        if said is not None and said.preempting:
            holders = f"{holders or 'too few GPUs are free'}; {said.preempting}"
        self._note(run, holders)
        return None

    def _note(self, run: Run, reason: str | None) -> None:
        """Who holds the GPUs it waits for, or the rule it waits on, written when it changes."""
        if reason != run.queue_reason:
            self.store.update(run.id, queue_reason=reason)

    def _admit_cpu(self, run: Run) -> Grant | None:
        if not self.store.leases.admit(run.id, cpu_job_limit()):
            return None
        return Grant(visible_devices="" if gpu.snapshot().available else None)

    def poll_interval(self, run_id: str) -> float:
        if self.store.leases.blocks:  # a box's keeper held the answer until the queue moved
            return KEEPER_OUT_POLL_S if self.keeper_out else BOX_POLL_S
        position = self.store.get(run_id).queue_position
        return HEAD_POLL_S if position in (None, 1) else WAIT_POLL_S

    def waiting_line(self, run_id: str) -> str:
        """One line for the run's log or cell: its place and what it waits for."""
        run = self.store.get(run_id)
        what = f"{run.gpus_requested} GPU(s)" if run.gpus_requested else "a CPU job slot"
        place = f"at position {run.queue_position}" if run.queue_position else "in line"
        held = f": {run.queue_reason}" if run.queue_reason and run.gpus_requested else ""
        return f"queued {place}, waiting for {what}{held}"
