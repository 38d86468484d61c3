"""Whether what a checkpoint would hold is finite, asked before every checkpoint is written.

Losses are read only at log time (about every 0.5 s), so without this a NaN between two logs
was saved as a checkpoint, and with ``--ckpt-every 1`` the rotation then deleted every good one.
A checkpoint copies every tensor to the host anyway, so the check adds no sync to the loop: one
``isfinite().all()`` per tensor on its device, and one host read per device.
"""

from __future__ import annotations

from itertools import chain
from typing import Iterable

import torch


def state_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The model's floating-point parameters and buffers (BatchNorm's running statistics turn
    NaN too), as this rank holds them: a sharded (FSDP) tensor's local shard."""
    tensors = []
    for tensor in chain(model.parameters(), model.buffers()):
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.is_floating_point() or local.is_complex():
            tensors.append(local.detach())
    return tensors


def all_finite(losses: list[torch.Tensor], tensors: Iterable[torch.Tensor]) -> bool:
    """True when every pending loss and every tensor is free of NaN and Inf."""
    flags: dict[torch.device, list[torch.Tensor]] = {}
    if losses:
        stacked = torch.stack([loss.detach().float().reshape(()) for loss in losses])
        flags.setdefault(stacked.device, []).append(torch.isfinite(stacked).all())
    for tensor in tensors:
        if tensor.numel():
            flags.setdefault(tensor.device, []).append(torch.isfinite(tensor).all())
    return all(bool(torch.stack(group).all()) for group in flags.values())
