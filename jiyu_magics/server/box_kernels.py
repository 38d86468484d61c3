"""This user's kernels that hold GPU memory, told to a shared box's book, and the reclaims an
admin asked for, carried out here, by the user's own server (nobody else may touch them).

Each upkeep the server reports its kernels on GPUs (id, GPUs, memory, idle time, whether a cell
runs); the book answers with the policy's idle limit (the panel warns past it) and the kernels
an admin asked to reclaim. Such a kernel is shut down only if it is idle still: a kernel with a
running cell is never touched, whatever was asked.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.box.client import BoxClient, BoxRefused, BoxUnreachable
from ..core.box.location import find
from .gpu_sampler import GpuKernel

log = logging.getLogger(__name__)


def report(kernels: list[GpuKernel]) -> tuple[list[str], float | None]:
    """The kernels an admin asked to reclaim, and the box's idle limit in seconds; nothing and
    None without a box (or while its keeper does not answer)."""
    location = find()
    if location is None:
        return [], None
    reports = [
        {
            "kernel_id": k["kernel_id"],
            "gpus": k["gpus"],
            "memory": k["memory"],
            "idle_s": k["idle_s"],
            "busy": k["execution_state"] not in (None, "idle"),
        }
        for k in kernels
    ]
    try:
        answer = BoxClient(location).call("kernels", kernels=reports)
    except (BoxUnreachable, BoxRefused):
        return [], None
    return list(answer["reclaim"]), float(answer["idle_kernel_s"])


def reclaimed(kernel_id: str) -> None:
    location = find()
    if location is None:
        return
    try:
        BoxClient(location).call("reclaimed", kernel_id=kernel_id)
    except (BoxUnreachable, BoxRefused):
        pass


async def carry_out(serverapp: Any, kernel_ids: list[str]) -> list[str]:
    """Shuts down each asked-for kernel that is idle now; returns those it shut down."""
    manager = serverapp.kernel_manager
    done = []
    for kernel_id in kernel_ids:
        if kernel_id not in manager.list_kernel_ids():
            continue
        if getattr(manager.get_kernel(kernel_id), "execution_state", None) != "idle":
            continue  # a running cell is never interrupted by a reclaim
        log.warning("jiyu: shutting down kernel %s: an admin of the shared box reclaimed it while idle", kernel_id)
        await manager.shutdown_kernel(kernel_id)
        done.append(kernel_id)
    return done
