"""A ranks pool on a Slurm allocation (``%ranks start N --backend slurm --nodes M``).

The pool's run is a Slurm job like any ``--backend slurm`` run: the batch script starts one
torchrun per node (``backends.slurm.script``) on the pool's ``ranks.py``, and the job is followed
and stopped through Slurm. What differs is the channel: the kernel cannot bind before it knows
where the ranks are, so it waits until Slurm runs the job, asks Slurm for the allocation's
nodes and their addresses, binds on its own address that reaches them, lets in those addresses
only, and only then writes the pool's address file, which the ranks wait for on the shared path.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.settings import Settings
from ..jobs.backends.slurm import commands as slurm
from ..jobs.backends.slurm.placement import SlurmJob
from ..jobs.job_error import JobError
from .channel import KernelEnd

if TYPE_CHECKING:
    from ..jobs.lifecycle import RunLifecycle

FOLLOW_S = 1.0


def channel_on_allocation(lifecycle: RunLifecycle, on_wait: Callable[[str], None] | None = None) -> KernelEnd:
    """Waits while Slurm holds the job pending (``on_wait`` hears why), then the kernel's end
    of the channel, reachable from the allocation's nodes and from nothing else."""
    said = None
    while True:
        run = lifecycle.follow()
        if not run.active:
            raise JobError(f"ranks pool {run.id} ended before its ranks started: {run.error or run.status}")
        job = lifecycle.job  # what the follow just asked Slurm: no second scontrol call
        info = job.info if isinstance(job, SlurmJob) else None
        if info is not None and info.state == "RUNNING" and info.nodes:
            addresses = slurm.node_addresses(info.nodes)
            return KernelEnd(host=kernel_host(list(addresses.values())), allowed=list(addresses.values()))
        line = f"waiting for Slurm to run job {run.scheduler_id or '(not submitted)'}" + (
            f": {run.queue_reason}" if run.queue_reason else ""
        )
        if on_wait is not None and line != said:
            on_wait(line)
            said = line
        time.sleep(FOLLOW_S)


def kernel_host(node_addresses: list[str]) -> str:
    """This machine's address on the route to the allocation's first node (no packet is sent:
    a UDP socket's ``connect`` only picks the route), unless ``JIYU_POOL_HOST`` names one."""
    host = Settings.from_environ().pool_host
    if host:
        return host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((node_addresses[0], 9))
        return str(probe.getsockname()[0])
