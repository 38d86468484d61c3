"""Up-front checks of the objects handed to ``fit``: fail in one line before anything runs."""

from __future__ import annotations

from typing import Any

import torch

from .train_errors import TrainConfigError


def check_objects(
    model: Any, optimizer: Any, train_data: Any, scheduler: Any = None, loss_fn: Any = None, train_step: Any = None
) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TrainConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise TrainConfigError(f"model {type(model).__name__} has no trainable parameters")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TrainConfigError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    mine = {id(p) for p in trainable}
    if not any(id(p) in mine for group in optimizer.param_groups for p in group["params"]):
        raise TrainConfigError(
            "the optimizer holds none of model's parameters; create it from this model "
            "(e.g. torch.optim.AdamW(model.parameters()))"
        )
    if train_data is None:
        raise TrainConfigError("no training data: pass a DataLoader (train_loader)")
    for name, fn in (("loss_fn", loss_fn), ("train_step", train_step)):
        if fn is not None and not callable(fn):
            raise TrainConfigError(f"{name} must be callable, got {type(fn).__name__}")
    if scheduler is not None and not callable(getattr(scheduler, "step", None)):
        raise TrainConfigError(f"scheduler must have a step() method, got {type(scheduler).__name__}")
    if getattr(scheduler, "optimizer", optimizer) is not optimizer:  # stepping it would raise, or change the LR
        raise TrainConfigError(
            f"the scheduler ({type(scheduler).__name__}) steps another optimizer than the one "
            "being trained; create it from this optimizer"
        )


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
