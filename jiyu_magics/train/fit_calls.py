"""Which training call of a run this is, and the checkpoints that are its own.

A launched run may hold several ``fit`` calls (a job notebook with two ``%%train`` cells). Each
call is known by its order in the script (counted in this process, per torchrun attempt) and
its name, and its checkpoints carry both: the order in the file name (``step-...`` for the
first, ``fit2-step-...`` for the second), order and name in the saved state (``"call"``).

When the script runs again (torchrun restarted the workers, or a launcher relaunched the job
with ``JIYU_RESUME=last``, as a Slurm requeue does), it replays from the top and each call finds
its own checkpoints, never another's: a call that had finished restores its final weights at
once (nothing is retrained), and the interrupted call resumes from its own last checkpoint. A
call without a checkpoint of its own starts afresh, unless it asks for one itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.runs.launch_context import LaunchContext
from .checkpoint import load_state_file
from .checkpoint_files import checkpoints_in, newest_first
from .train_errors import TrainConfigError

_started: dict[tuple, int] = {}  # (run id, attempt) -> calls started in this process


@dataclass(frozen=True)
class FitCall:
    index: int  # 0 for the script's first call
    name: str

    @classmethod
    def next_in(cls, run_id: str, name: str, context: LaunchContext) -> FitCall:
        """The next call of ``run_id`` in this process: the script's order in this attempt."""
        key = (run_id, context.restart, context.resume)
        index = _started.get(key, 0)
        _started[key] = index + 1
        return cls(index, name)

    @property
    def label(self) -> str:
        """The prefix of this call's checkpoint files (none for the first call)."""
        return f"fit{self.index + 1}-" if self.index else ""

    def as_state(self) -> dict:
        return {"index": self.index, "name": self.name}

    def owns(self, state: dict) -> bool:
        """A checkpoint written by this call (by order and name); one without the record (an
        older jiyu) is taken by its file name alone."""
        call = state.get("call")
        return call is None or call == self.as_state()


def starts_afresh(requested: str | None, owned: bool, relaunched: bool) -> bool:
    """A relaunched call of a launched run without a checkpoint of its own, which asked for
    none: it starts from the beginning, never from another call's checkpoint."""
    return requested is None and not owned and relaunched


def own_checkpoints(folder: Path, call: FitCall, relaunched: bool) -> list[Path]:
    """When relaunched (``LaunchContext.relaunched``), this call's checkpoints in ``folder``,
    newest first; none otherwise."""
    if not relaunched or not folder.is_dir():
        return []
    return newest_first(p for p in checkpoints_in(folder, call.label) if call.owns(_peek(p)))


def is_own_after_restart(state: dict, call: FitCall, relaunched: bool) -> bool:
    """A checkpoint this very call wrote before the script was relaunched."""
    return relaunched and state.get("call") == call.as_state()


def restored_message(step: int, checkpoint: str) -> str:
    return (
        f"Finished before the job was restarted: its final weights (step {step}) were "
        f"restored from {checkpoint}, nothing was retrained."
    )


def _peek(path: Path) -> dict:
    """The checkpoint's small entries, without reading its tensors (memory-mapped; a sharded
    checkpoint's state file holds no model or optimizer)."""
    if path.is_dir():
        try:
            return load_state_file(path, verified=True)  # whose it is; a resume checks it before it loads
        except TrainConfigError:
            return {"call": "unreadable"}
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - torch.load raises many types for a file that is not a checkpoint
        return {"call": "unreadable"}
    return state if isinstance(state, dict) else {"call": "not a checkpoint"}
