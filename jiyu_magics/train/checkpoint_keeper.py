"""A ``fit`` call's checkpoints: saved under its names, the newest ``keep`` of them kept.

File checkpoints are written by rank 0 alone (the other ranks only record the same paths, for
their results); sharded ones (``--strategy fsdp``) by every rank, each its shard. Rotation is
rank 0's either way, and removes a sharded checkpoint's folder as a whole.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from .checkpoint import FORMAT, CheckpointWriteError, save_atomic
from .checkpoint_files import checkpoint_name, remove_checkpoint
from .process_group import DistContext


class CheckpointKeeper:
    def __init__(self, folder: Path, keep: int, label: str = "", sharded: bool = False):
        self.folder, self.keep, self.label, self.sharded = Path(folder), keep, label, sharded
        self.saved: list[Path] = []
        self.last_step: int | None = None  # the step of ``last``

    def path_for(self, step: int) -> Path:
        return self.folder / checkpoint_name(step, self.label, self.sharded)

    def save(self, state: dict[str, Any], step: int, write: bool = True) -> Path:
        """A file checkpoint: saves (rank 0) or only records (other ranks)."""
        path = self.path_for(step)
        if write:
            with self._keeping_last():
                save_atomic({"format": FORMAT, **state}, path)
        return self._saved(path, step, remove=write)

    def save_sharded(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        state: dict[str, Any],
        step: int,
        dist: DistContext,
    ) -> Path:
        """A sharded checkpoint: every rank calls it and writes its shard."""
        from .sharded_checkpoint import save_sharded

        path = self.path_for(step)
        with self._keeping_last():
            save_sharded(model, optimizer, state, path, dist)
        return self._saved(path, step, remove=dist.is_writer)

    def _saved(self, path: Path, step: int, remove: bool) -> Path:
        if path in self.saved:
            self.saved.remove(path)
        self.saved.append(path)
        self.last_step = step
        while len(self.saved) > self.keep:
            old = self.saved.pop(0)
            if remove:
                remove_checkpoint(old)
        return path

    @contextmanager
    def _keeping_last(self):
        """A failed save's line ends with the checkpoint that is still there."""
        try:
            yield
        except CheckpointWriteError as error:
            if self.last is None:
                raise
            kept = f"{error.strerror}; the last checkpoint, {self.last}, is kept"
            raise CheckpointWriteError(error.errno, kept) from None

    @property
    def last(self) -> Path | None:
        return self.saved[-1] if self.saved else None
