"""What a checkpoint holds and how it is put back.

Model and optimizer state are always the full, unwrapped state (no ``module.`` prefixes, no
shards), so a single process can load what a DDP or FSDP job saved; under FSDP every rank takes
part in gathering it and rank 0 writes it.
"""

from __future__ import annotations

from typing import Any

import torch

from .train_errors import TrainConfigError


def model_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> tuple[dict, dict]:
    if not sharded:
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_model_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], source: str, sharded: bool
) -> None:
    try:
        if sharded:
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
        raise TrainConfigError(
            f"checkpoint {source} does not fit this model: {str(error).strip().splitlines()[0]}"
        ) from None


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
