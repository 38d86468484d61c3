"""What a failed cell leaves in the distributed models a pool rank holds, undone: the step it was
in is lost, the weights and the optimizer's state are kept.

A cell that fails inside a training step (an error, an interrupt, a collective aborted under it)
leaves an FSDP2 module mid-iteration: parameters unsharded, a forward root claimed, a backward
callback marked queued, reduce-scatters in flight. The next forward then runs different
collectives on that rank than on a peer that failed elsewhere in the step, and gloo ends the
process on the mismatch ("Received data size doesn't match expected size"). torch 2.13's
``FSDPModule.reset_iter_state`` is the documented recovery: called on each root after the
failure. The step's gradients are dropped too (DDP's and FSDP's): a gradient some ranks reduced
and others did not must never reach an optimizer step, and a loop that zeroes its gradients
after ``step()`` would otherwise apply the failed step's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

import torch

CONTAINERS = (list, tuple, dict)
CONTAINER_ITEMS = 64  # how far into a list or dict of the namespace it looks


def drop_failed_step(namespace: Mapping[str, Any]) -> list[str]:
    """Resets every DDP and FSDP2 model in ``namespace`` (its values, and one level into lists,
    tuples and dicts) to the state before the step that failed; the names of those reset.
    Imports nothing: a model can be wrapped only by a class some cell imported already (a
    failing cell's end waits for this)."""
    ddp, fsdp = (
        _loaded("torch.nn.parallel.distributed", "DistributedDataParallel"),
        _loaded("torch.distributed.fsdp", "FSDPModule"),
    )
    if ddp is None and fsdp is None:
        return []
    reset: list[str] = []
    seen: set[int] = set()
    for name, value in _candidates(namespace):
        if not isinstance(value, torch.nn.Module):
            continue
        for module in value.modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            if ddp is not None and isinstance(module, ddp):
                _drop_gradients(module)
            elif fsdp is not None and isinstance(module, fsdp) and _is_fsdp_root(module):
                _reset_fsdp(module)
                _drop_gradients(module)
            else:
                continue
            reset.append(name)
    return sorted(set(reset))


def _loaded(module: str, name: str) -> type | None:
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded is not None else None


def _candidates(namespace: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    for name, value in list(namespace.items()):
        if name.startswith("_"):
            continue
        yield name, value
        if isinstance(value, CONTAINERS):
            inner = value.values() if isinstance(value, dict) else value
            for item in list(inner)[:CONTAINER_ITEMS]:
                yield name, item


def _is_fsdp_root(module: Any) -> bool:
    """Whether ``module`` is the root its forward started from (None before a first forward)."""
    return bool(module._get_fsdp_state()._is_root)


def _drop_gradients(model: torch.nn.Module) -> None:
    for parameter in model.parameters():
        parameter.grad = None


def _reset_fsdp(root: Any) -> None:
    """``reset_iter_state`` waits on the all-gathers in flight; one of an aborted generation
    raises its error instead (it is over all the same): dropped, and the reset made again."""
    try:
        root.reset_iter_state()
    except RuntimeError:
        for state in root._get_fsdp_state()._state_ctx.all_states:
            for param_group in state._fsdp_param_groups:
                param_group._all_gather_result = None
        root.reset_iter_state()
