"""The module the loop calls: the user's model, DDP- or FSDP-wrapped under torchrun, compiled
on request. Checkpoints always hold the unwrapped model's state, so a single process loads them."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from .distributed import DistContext


def wrap_model(model: torch.nn.Module, device: torch.device, dist: DistContext, strategy: str,
               compile: bool) -> torch.nn.Module:
    wrapped = model
    if dist.distributed:
        wrapped = _fsdp(model) if strategy == "fsdp" else _ddp(model, device)
    if compile:
        wrapped = torch.compile(wrapped)
    return wrapped


def _ddp(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def _fsdp(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child)
    return fully_shard(model)


def uses_ddp(wrapped: torch.nn.Module) -> bool:
    inner = getattr(wrapped, "_orig_mod", wrapped)
    return isinstance(inner, DistributedDataParallel)
