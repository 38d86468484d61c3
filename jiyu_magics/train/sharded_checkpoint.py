"""Sharded checkpoints for ``--strategy fsdp``: torch.distributed.checkpoint (DCP) folders.

A full-state checkpoint funnels the whole model and optimizer through rank 0: gathered over the
network, held whole in its memory, written by one process. Here every rank writes its own
shard of the model and optimizer, in parallel, into one folder (``dcp.save``: a
``__<rank>_0.distcp`` file per rank and the ``.metadata`` that rank 0 writes once every rank
finished), and a resume on any number of ranks reads the parts its shards need (``dcp.load``
reshards). ``get_state_dict``/``set_state_dict`` give the model's and optimizer's state keyed by
parameter name, with the optimizer's state made first where it has none yet (a fresh optimizer
before its first step), so every key, ``step`` included, is saved and loaded.

What is not model or optimizer (step, epoch, position in the epoch, every rank's RNG, scaler,
scheduler, which call wrote it) goes, as in a file checkpoint, into ``STATE_FILE`` in the
folder, written by rank 0. Every file gets its SHA-256 beside it as it is written (each rank its
shard's, rank 0 the metadata's: ``checksummed_dcp``); a resume checks them all, the ranks
sharing the reading, before anything loads (``intact_checkpoint``).

Atomic like a file checkpoint: the ranks write into ``.<name>.tmp-<pid of rank 0>``, and rank 0
renames it to its name only after ``dcp.save`` returned on it (which it does after every rank's
shard is written and fsynced and the metadata is written) and its state file is fsynced. A save
that did not finish leaves a temporary folder, which ``newest_checkpoint`` never picks and
removes once rank 0's process is gone. Every rank learns the outcome, so all raise the same
error (or none): no rank trains on while another is gone with a failed save.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from .checkpoint import (
    FORMAT,
    CheckpointWriteError,
    dcp_failures,
    failure_line,
    os_error_in,
    save_atomic,
    tensor_bytes,
    write_failure,
)
from .checkpoint_files import STATE_FILE, fsync_folder, remove_checkpoint, remove_path, remove_stale_temps, temp_name
from .checksummed_dcp import checksummed_writer
from .process_group import DistContext


def save_sharded(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], path: Path, dist: DistContext
) -> Path:
    """Every rank calls it (collective): writes this rank's shard of ``model`` and ``optimizer``
    and, on rank 0, ``state`` (the rest) into the checkpoint folder ``path``."""
    temp = _prepared(path, dist)
    tensors = None
    try:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        tensors = {"model": model_state, "optimizer": optimizer_state}
        dcp.save(tensors, storage_writer=checksummed_writer(temp), no_dist=not dist.distributed)
    except (Exception, CheckpointException) as error:  # DCP's own is a BaseException
        if dist.is_writer:
            remove_path(temp)
        cause = _os_error(error)
        if cause is None:
            raise
        raise CheckpointWriteError(cause.errno, write_failure(cause, path, tensor_bytes(tensors or {}))) from None
    failure = _commit(state, temp, path) if dist.is_writer else None
    failure = dist.broadcast(failure)
    if failure is not None:
        raise CheckpointWriteError(*failure)
    return path


def _prepared(path: Path, dist: DistContext) -> Path:
    """The temporary folder every rank writes into, made by rank 0 and named by its pid (so it
    is known as stale once rank 0 is gone); a folder that cannot be made fails every rank."""
    outcome: tuple[str | None, Failure | None] = (None, None)
    if dist.is_writer:
        temp = temp_name(path, os.getpid())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(path.parent)
            remove_path(temp)
            temp.mkdir()
            outcome = (str(temp), None)
        except OSError as error:
            outcome = (None, (error.errno, write_failure(error, path, 0)))
    temp, failure = dist.broadcast(outcome)
    if failure is not None:
        raise CheckpointWriteError(*failure)
    return Path(temp)


Failure = tuple[int | None, str]  # (errno, the one line), broadcast from rank 0 to every rank


def _commit(state: dict[str, Any], temp: Path, path: Path) -> Failure | None:
    """Rank 0, after every shard is written: the state file, then the rename that makes the
    checkpoint exist. Returns the failure (errno, line) for every rank to raise, or None."""
    try:
        save_atomic({"format": FORMAT, "sharded": True, **state}, temp / STATE_FILE)
        if path.exists():  # the same step saved again (a run resumed into the same folder)
            remove_checkpoint(path)
        os.replace(temp, path)
        fsync_folder(path.parent)
    except CheckpointWriteError as error:  # the state file's own line (a full disk: how much it needed)
        remove_path(temp)
        return (error.errno, error.strerror or str(error))
    except OSError as error:
        remove_path(temp)
        return (error.errno, write_failure(error, path, 0))
    return None


def load_sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: Path, distributed: bool) -> None:
    """Loads the checkpoint folder into ``model`` and ``optimizer`` in place, whatever number of
    ranks wrote it: each rank reads what its own shards need (every rank takes part when
    ``distributed``; one process reads it all)."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    tensors: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(tensors, checkpoint_id=path, no_dist=not distributed)
    except CheckpointException as error:  # every rank's errors in one; the first one says it
        raise RuntimeError(failure_line(error)) from None
    set_state_dict(model, optimizer, model_state_dict=tensors["model"], optim_state_dict=tensors["optimizer"])


def _os_error(error: BaseException) -> OSError | None:
    """The OSError behind a failed save: its own, or a rank's that DCP collected."""
    for candidate in [error, *dcp_failures(error)]:
        found = os_error_in(candidate)
        if found is not None:
            return found
    return None
