"""Who holds the GPUs a queued run waits for, in one line: ``GPU 0 held by PID 1234 (python,
not a jiyu run); GPU 1 leased by run train-a (3fa1c2d4)``.

"waiting for 2 GPU(s)" alone sends the user hunting through ``nvidia-smi``; the first run in
line has just read every GPU's processes through NVML and attributed each to a run, a kernel or
someone else (``core.gpu.owners``), so it can say which GPU is taken and by whom. Stored as the
run's ``queue_reason``: ``jiyu jobs``, the panel and the waiting line in the run's log show it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import psutil

from ..core.gpu.owners import lease_holder
from ..core.gpu.snapshot import GpuDevice, GpuProcess, GpuSnapshot
from ..core.store.leases import GpuSlot

SHOWN_PER_GPU = 3  # processes named per GPU; more are counted


def holders_line(snap: GpuSnapshot, usable: Iterable[GpuSlot], own_pids: Iterable[int] = ()) -> str | None:
    """What holds each visible GPU a new lease cannot take (``usable`` are those it may take,
    leases aside): its leases' runs, or the processes that keep it busy. None when nothing does."""
    free, own = {slot.uuid for slot in usable}, set(own_pids)
    parts = []
    for device in snap.devices:
        if device.visible_index is None:
            continue
        if device.leases:
            now = time.time()
            runs = ", ".join(lease_holder(lease, now) for lease in device.leases)
            parts.append(f"GPU {device.index} leased by {runs}")
        elif device.uuid not in free:
            parts.append(f"GPU {device.index} held by {_processes(device, own)}")
    return "; ".join(parts) or None


def _processes(device: GpuDevice, own: set[int]) -> str:
    procs = sorted((p for p in device.processes if p.pid not in own), key=lambda p: p.used_memory or 0, reverse=True)
    named = ", ".join(_who(p) for p in procs[:SHOWN_PER_GPU])
    more = len(procs) - SHOWN_PER_GPU
    return (named + (f" and {more} more" if more > 0 else "")) or "processes NVML does not list"


def _who(proc: GpuProcess) -> str:
    """``PID 1234 (python, not a jiyu run)``, or the owner's own label (a run, a kernel)."""
    owner: Mapping[str, Any] = proc.owner or {}
    kind = owner.get("kind")
    if kind in ("run", "kernel", "user"):
        return f"PID {proc.pid} ({owner.get('label')})"
    if kind == "outside" or proc.command is None:
        return f"PID {proc.pid} (outside this container)"
    return f"PID {proc.pid} ({_name(proc)}, not a jiyu run)"


def _name(proc: GpuProcess) -> str:
    try:
        return psutil.Process(proc.pid).name()
    except psutil.Error:
        return (proc.command or "?").split()[0].rsplit("/", 1)[-1]
