"""A replaced rank brought up to date: the survivors' weights, buffers and optimizer state, sent
from one of them to every rank, and every DDP wrapper's reducer made fresh, so a DDP model
trains on with equal replicas.

A new process for a dead rank starts with an empty namespace. Its ``--on-join`` cell builds the
model again (``DDP(net, init_sync=False)``: no collective the survivors would have to match) and
an optimizer of the same shape; then every rank calls ``share_training_state``. The weights
alone are not enough: an optimizer with moments (Adam's) on one rank and fresh ones on another
steps the replicas apart. The optimizer's state goes as tensors (one broadcast each, on the
backend's device) with its layout pickled once, not as a pickle of the tensors.

An FSDP model's shards live each on its own rank; the dead rank's went with it, and no survivor
holds them. It is refused with what to do instead: every rank loads the latest sharded
checkpoint.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from .lasting_group import backend_of


@dataclass(frozen=True)
class TensorSlot:
    """Where a tensor of the optimizer's state goes, as the source rank describes it."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    on_cpu: bool


def share_training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, src: int = 0) -> None:
    """Rank ``src``'s parameters, buffers and (with ``optimizer``) optimizer state on every rank.
    Collective: every rank of the default group calls it, with a model of the same structure."""
    _refuse_sharded(model)
    for wrapper in _ddp_wrappers(model):
        fresh_reducer(wrapper)
    device = _transfer_device()
    with torch.no_grad():
        for tensor in itertools.chain(model.parameters(), model.buffers()):
            _broadcast(tensor.data, src, device)
    if optimizer is not None:
        _share_optimizer(optimizer, src, device)


def _ddp_wrappers(model: torch.nn.Module) -> list[Any]:
    from torch.nn.parallel import DistributedDataParallel

    return [module for module in model.modules() if isinstance(module, DistributedDataParallel)]


def fresh_reducer(ddp: Any) -> None:
    """Gives a DDP wrapper the reducer a new one would have: its first bucket layout, its
    buckets to be rebuilt after the next backward (a collective every rank makes at the same
    step), its comm hooks registered again. A survivor's reducer rebuilt its buckets in the
    order of its first backward; a replacement's starts with one bucket, and gloo ends both
    processes on the first all-reduce of buckets of different sizes. The same Python object
    is kept (what the optimizer and the user's names hold)."""
    parameters, expect_sparse = ddp._build_params_for_reducer()
    names = ddp._build_debug_param_to_name_mapping(parameters)
    static = ddp.static_graph
    ddp._ddp_init_helper(parameters, expect_sparse, names, static)
    for hook, state in ddp._comm_hooks:
        dist._register_comm_hook(ddp.reducer, state, hook)
    if ddp.mixed_precision is not None:
        ddp.reducer._set_mixed_precision_param_dtype(ddp.mixed_precision.param_dtype)
    ddp._has_rebuilt_buckets = False
    if static:
        ddp.static_graph = False
        ddp._set_static_graph()


def _refuse_sharded(model: torch.nn.Module) -> None:
    from torch.distributed.fsdp import FSDPModule

    if any(isinstance(module, FSDPModule) for module in model.modules()):
        raise TypeError(
            "share_training_state: an FSDP model's shards live each on its own rank, and a replaced rank's went "
            "with it; load the latest sharded checkpoint on every rank instead (torch.distributed.checkpoint.load)"
        )


def _share_optimizer(optimizer: torch.optim.Optimizer, src: int, device: torch.device | None) -> None:
    mine = dist.get_rank() == src
    state = optimizer.state_dict() if mine else None
    tensors: list[torch.Tensor] = []
    layout = [_layout(state, tensors) if mine else None]
    dist.broadcast_object_list(layout, src=src)
    if not mine:
        parameter = next(iter(p for group in optimizer.param_groups for p in group["params"]), None)
        state = _materialize(layout[0], tensors, parameter.device if parameter is not None else torch.device("cpu"))
    for tensor in tensors:
        _broadcast(tensor, src, device)
    if not mine:
        assert state is not None
        optimizer.load_state_dict(state)


def _layout(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` with each tensor replaced by its slot (``tensors`` collects them, in order)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return TensorSlot(tuple(value.shape), value.dtype, value.device.type == "cpu")
    if isinstance(value, dict):
        return {key: _layout(item, tensors) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_layout(item, tensors) for item in value)
    return value


def _materialize(value: Any, tensors: list[torch.Tensor], device: torch.device) -> Any:
    """The layout with an empty tensor in each slot (``tensors`` collects them, in order)."""
    if isinstance(value, TensorSlot):
        tensor = torch.empty(value.shape, dtype=value.dtype, device="cpu" if value.on_cpu else device)
        tensors.append(tensor)
        return tensor
    if isinstance(value, dict):
        return {key: _materialize(item, tensors, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_materialize(item, tensors, device) for item in value)
    return value


def _transfer_device() -> torch.device | None:
    """Where NCCL takes a CPU tensor through (a GPU); None: the tensor goes as it is (gloo)."""
    if backend_of() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def _broadcast(tensor: torch.Tensor, src: int, device: torch.device | None) -> None:
    if device is None or tensor.device.type != "cpu":
        dist.broadcast(tensor, src=src)
        return
    moved = tensor.to(device)
    dist.broadcast(moved, src=src)
    tensor.copy_(moved.cpu())
