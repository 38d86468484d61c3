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
    state file only) into ``model`` and ``optimizer``. ``sharded``: the model is FSDP-sharded.
    A file checkpoint is checked first (``check_fits``): ``load_state_dict`` copies whatever
    fits before it complains about the rest, so a refusal after it would leave the kernel's
    model half overwritten."""
    if not is_sharded(Path(source)):
        check_fits(model, optimizer, state, source, sharded)
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


def check_fits(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], source: str, sharded: bool
) -> None:
    """``TrainConfigError`` saying what differs when the checkpoint's model state (keys and
    shapes) or optimizer state (its class, parameter groups, per-parameter state shapes) does
    not fit ``model`` and ``optimizer``. Reads both, changes neither."""
    problem = _model_mismatch(model, state.get("model"))
    if problem is None and not sharded:
        problem = _optimizer_mismatch(optimizer, state.get("optimizer"), state.get("optimizer_class"))
    if problem is not None:
        raise TrainConfigError(f"checkpoint {source} does not fit this model: {problem}")


def _model_mismatch(model: torch.nn.Module, saved: Any) -> str | None:
    if not isinstance(saved, dict):
        return "it holds no model state"
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or unexpected:
        differences = (("missing", missing), ("unexpected", unexpected))
        return "; ".join(f"{label} {_names(keys)}" for label, keys in differences if keys)
    for key, tensor in own.items():
        theirs = saved[key]
        if isinstance(tensor, torch.Tensor) and isinstance(theirs, torch.Tensor) and theirs.shape != tensor.shape:
            return f"{key} has shape {tuple(theirs.shape)} in the checkpoint, {tuple(tensor.shape)} in the model"
    return None


def _optimizer_mismatch(optimizer: torch.optim.Optimizer, saved: Any, saved_class: Any) -> str | None:
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list):
        return "it holds no optimizer state"
    if isinstance(saved_class, str) and saved_class != type(optimizer).__name__:
        return f"it was saved with a {saved_class} optimizer, this one is a {type(optimizer).__name__}"
    groups = saved["param_groups"]
    sizes = [len(group["params"]) for group in optimizer.param_groups]
    theirs = [len(group.get("params", ())) for group in groups if isinstance(group, dict)]
    if theirs != sizes:
        return f"the optimizer's parameter groups hold {sizes} parameters, the checkpoint's {theirs}"
    params = [p for group in optimizer.param_groups for p in group["params"]]
    ids = [i for group in groups for i in group["params"]]
    for index, per_param in (saved.get("state") or {}).items():
        if index not in ids or not isinstance(per_param, dict):
            continue
        param = params[ids.index(index)]
        for name, value in per_param.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                return (
                    f"its optimizer state {name!r} of parameter {index} has shape {tuple(value.shape)}, "
                    f"the parameter {tuple(param.shape)}"
                )
    return None


def _names(keys: list[str], shown: int = 3) -> str:
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


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
