"""The module the loop calls: the user's model, DDP- or FSDP-wrapped under torchrun, compiled
on request. Checkpoints always hold the unwrapped model's state, so a single process loads them."""

from __future__ import annotations

from typing import cast

import torch
from torch.nn.parallel import DistributedDataParallel

from .process_group import DistContext
from .train_errors import TrainConfigError


def wrap_model(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    dist: DistContext,
    strategy: str,
    compile: bool,
) -> torch.nn.Module:
    wrapped = model
    if dist.distributed:
        wrapped = shard(model, optimizer) if strategy == "fsdp" else _ddp(model, device)
    if compile:
        # an OptimizedModule, a Module: torch.compile's annotation says only "a callable like it"
        wrapped = cast(torch.nn.Module, torch.compile(wrapped))
    return wrapped


def _ddp(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def shard(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> torch.nn.Module:
    """FSDP2 (``fully_shard``) on each direct child holding parameters, then the root.

    ``fully_shard`` replaces the parameters with sharded ones, so the optimizer the user built
    before (the normal order in a notebook) is pointed at the new parameters, by name. A model
    an earlier call sharded (a ranks pool keeps it across cells) stays as it is, and so does
    its optimizer, state and all: training goes on."""
    from torch.distributed.fsdp import fully_shard

    if uses_fsdp(model):
        return model
    if optimizer.state:
        raise TrainConfigError(
            "--strategy fsdp needs a fresh optimizer (it already holds state); resume from a checkpoint instead"
        )
    names = {id(p): name for name, p in model.named_parameters()}
    for child in model.children():
        if any(p.requires_grad for p in child.parameters()):
            fully_shard(child)
    fully_shard(model)
    sharded = dict(model.named_parameters())
    for group in optimizer.param_groups:
        group["params"] = [sharded[names[id(p)]] for p in group["params"]]
    return model


def uses_ddp(wrapped: torch.nn.Module) -> bool:
    inner = getattr(wrapped, "_orig_mod", wrapped)
    return isinstance(inner, DistributedDataParallel)


def uses_fsdp(model: torch.nn.Module) -> bool:
    return hasattr(model, "set_requires_gradient_sync")
