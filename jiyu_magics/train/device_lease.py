"""The lease an in-kernel ``%%train`` / ``fit`` records on the GPU it trains on.

A kernel cannot wait in a queue: the user chose the device and the model is already there.
So the run records a lease on that GPU (by UUID, found through NVML: ``cuda:N`` under the
kernel's ``CUDA_VISIBLE_DEVICES``) for as long as it trains, which keeps queued jobs off the
GPU, and says so when other runs hold it too (the lease is then a shared one). The lease ends
with the run, in the transaction that records its end.

On a shared box the box's book takes the lease: a GPU another user leases, or one more GPU
than the policy allows a user, is refused (``DeviceRefused``, one line naming who holds it or
the rule) before a step is trained; the user's own runs may share as above.
"""

from __future__ import annotations

import os

import torch

from ..core.box.client import BoxRefused, BoxUnreachable
from ..core.gpu import snapshot as gpu
from ..core.gpu.visible_devices import parse_visible_devices
from ..core.store.database import StoreUnusable
from ..core.store.leases import GpuSlot
from ..core.store.run_store import RunStore


def record_device_lease(
    run_id: str, device: torch.device, visible_devices: str | None, store: RunStore | None = None
) -> str | None:
    """Leases the GPU of ``device`` for ``run_id``; returns a line for the user when other
    runs hold that GPU, else None. A CPU device, or a GPU NVML cannot name, records nothing.
    ``visible_devices``: the ``CUDA_VISIBLE_DEVICES`` the process started with (``cuda:N`` is
    the N-th of them)."""
    slot = _slot_of(device, visible_devices)
    if slot is None:
        return None
    store = store or RunStore()
    try:
        _, holders = store.leases.record(run_id, slot)
    except BoxRefused as refused:
        raise DeviceRefused(f"cuda:{device.index} (GPU {slot.index}): {refused}") from None
    except BoxUnreachable as problem:
        return f"{problem}; this training holds GPU {slot.index} without a lease"
    except StoreUnusable:
        return None
    if not holders:
        return None
    held = [store.get(other) for other in holders]
    names = ", ".join(f"run {r.name} ({r.id}, {r.kind}{_where(r.notebook)})" for r in held)
    return f"GPU {slot.index} is leased by {names}; this training shares it"


class DeviceRefused(Exception):
    """The box's book refuses this training its GPU; ``str()`` is one line naming who or the rule."""


def _slot_of(device: torch.device, visible_devices: str | None) -> GpuSlot | None:
    if device.type != "cuda" or device.index is None:
        return None
    snap = gpu.snapshot()
    if not snap.available:
        return None
    uuids = [d.uuid or "" for d in snap.devices]
    order = parse_visible_devices(visible_devices, uuids).order
    if device.index >= len(order):
        return None
    physical = order[device.index]
    return GpuSlot(uuids[physical], physical) if uuids[physical] else None


def _where(notebook: str | None) -> str:
    return f", {os.path.basename(notebook)}" if notebook else ""
