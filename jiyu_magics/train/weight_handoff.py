"""Weights handed between a notebook kernel and the torchrun ranks of ``%%train --nproc``.

The launcher saves the kernel's current model to ``JIYU_INIT_WEIGHTS`` (``LaunchContext``): each rank loads it
before wrapping, so a model trained or loaded earlier in the kernel continues (and every rank
starts from the same weights). At the end rank 0 writes the full, unwrapped weights to
``JIYU_FINAL_WEIGHTS`` (under FSDP every rank helps gather them), and the kernel loads them
back into its ``model``. Both files are written atomically, like checkpoints.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .checkpoint import FORMAT, load_checkpoint, save_atomic


def save_weights(model: torch.nn.Module, path: Path | str) -> Path:
    """The model's weights, moved to the CPU so ranks on other devices can load them."""
    return write_weights(model.state_dict(), path)


def write_weights(state: dict, path: Path | str, step: int | None = None) -> Path:
    cpu = {name: tensor.detach().cpu() for name, tensor in state.items()}
    return save_atomic({"format": FORMAT, "model": cpu, "step": step}, path)


def load_weights(model: torch.nn.Module, path: Path | str) -> None:
    """Loads into ``model`` in place, onto whatever device its parameters are on."""
    model.load_state_dict(load_checkpoint(path, map_location="cpu")["model"])


def load_initial_weights(model: torch.nn.Module, path: str | None) -> str | None:
    """Loads the weights a launcher handed over (``LaunchContext.init_weights``); returns the
    path it loaded, None when there were none."""
    if not path:
        return None
    load_weights(model, path)
    return path


def portable(value: object) -> tuple[object, str]:
    """What a ranks pool hands the kernel of an object (``%ranks pull``): a module's weights,
    on the CPU and unwrapped from DDP, which the kernel loads into its own module (the class
    may exist there only); anything else as it is."""
    if isinstance(value, torch.nn.Module):
        module = getattr(value, "module", value)  # DistributedDataParallel
        return {key: tensor.detach().cpu() for key, tensor in module.state_dict().items()}, "state_dict"
    return value, "object"
