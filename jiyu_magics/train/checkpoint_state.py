"""What a checkpoint holds and how it is put back.

A file checkpoint holds the full, unwrapped state (no ``module.`` prefixes, no shards), so a
single process can load what a DDP job saved. Under FSDP the checkpoint is sharded (a folder,
``sharded_checkpoint``): every rank writes its shard. Either kind resumes any run: a sharded
one on any number of ranks, FSDP or not (each rank reads what its parameters need), a file one
under FSDP through a full state dict that each rank takes its shard of.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .checkpoint import failure_line
from .checkpoint_files import is_sharded
from .train_errors import TrainConfigError


def model_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """The state a file checkpoint holds (a model that is not sharded)."""
    return model.state_dict(), optimizer.state_dict()


def full_model_state(model: torch.nn.Module, sharded: bool) -> dict:
    """The model's full weights on the CPU: under FSDP every rank takes part in gathering them
    and only rank 0 gets them (the others get an empty dict). The optimizer is not gathered."""
    if not sharded:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_model_optimizer_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    source: str,
    sharded: bool,
    distributed: bool = False,
) -> None:
    """Puts the checkpoint at ``source`` (its contents ``state``; for a sharded checkpoint, the
    state file only) into ``model`` and ``optimizer``. ``sharded``: the model is FSDP-sharded."""
    try:
        if is_sharded(Path(source)):
            from .sharded_checkpoint import load_sharded

            load_sharded(model, optimizer, Path(source), distributed)
        elif sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(
                model,
                optimizer,
                model_state_dict=state["model"],
                optim_state_dict=state["optimizer"],
                options=StateDictOptions(full_state_dict=True),
            )
        else:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, KeyError, ValueError) as error:
        raise TrainConfigError(f"checkpoint {source} does not fit this model: {failure_line(error)}") from None


def other_states(scaler, scheduler) -> dict[str, Any]:
    return {
        "scaler": scaler.state_dict() if scaler is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
    }


def load_other_states(state: dict[str, Any], scaler, scheduler) -> None:
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    if scheduler is not None and state.get("scheduler"):
        scheduler.load_state_dict(state["scheduler"])
