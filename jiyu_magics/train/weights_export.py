"""A checkpoint as one file that a single process loads: ``jiyu export-weights``.

A sharded checkpoint (``--strategy fsdp``) is a folder of shards that only
torch.distributed.checkpoint reads. Exporting puts the shards together in this process (no
process group, whatever number of ranks wrote them) and writes, atomically, either the model's
weights alone (a plain ``{name: tensor}`` state dict: ``model.load_state_dict(torch.load(F))``)
or the whole checkpoint as one jiyu checkpoint file (model, optimizer, step, RNG ...), which
``--resume`` takes like any other. A file checkpoint exports the same way. Which checkpoint, and
whether ``--to`` may be written, and whether every file of the checkpoint still holds the bytes
its sum was taken of, is settled before torch is imported: a refusal is immediate.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..core.events.log import read_events
from ..core.runs.files import RunFiles
from ..core.runs.model import EventKind
from ..core.user_files import file_kind
from .checkpoint_files import is_checkpoint, is_sharded, newest_checkpoint
from .checkpoint_sums import damage
from .train_errors import TrainConfigError


@dataclass
class ExportedWeights:
    source: Path
    to: Path
    step: int | None
    tensors: int  # how many tensors the model has
    size: int  # bytes of tensor data written
    whole: bool  # the whole checkpoint, not only the model's weights
    ranks: int | None  # how many ranks wrote it (a sharded checkpoint)

    def describe(self) -> str:
        what = "the whole checkpoint (model, optimizer, step, RNG)" if self.whole else "the model's weights"
        where = f"sharded by {self.ranks} rank(s)" if self.ranks else "one file"
        step = f" of step {self.step}" if self.step is not None else ""
        return (
            f"Wrote {self.to}: {what}{step}, {self.tensors} model tensors, {_size(self.size)}, "
            f"from {self.source} ({where})"
        )


def _size(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 2**10:.1f} KiB"


def export_weights(source: Path | str, to: Path | str, whole: bool = False, force: bool = False) -> ExportedWeights:
    """Writes the checkpoint ``source`` (a file or a sharded folder) to the file ``to`` (through
    a symbolic link there only when ``force``)."""
    source = Path(source)
    if not is_checkpoint(source):
        raise TrainConfigError(f"{source} is not a checkpoint (a .pt file or a complete .dcp folder)")
    target = writable_target(Path(to), source, follow_links=force)
    damaged = damage(source)  # every file against the sum saved with it (each shard of a sharded one)
    if damaged:
        raise TrainConfigError(f"{damaged}; export an earlier checkpoint (a run's --step N)")
    from .checkpoint import load_checkpoint, save_atomic, tensor_bytes  # torch, once the input is known good

    state = load_checkpoint(source, parts=None if whole else {"model"}, verified=True)
    if "model" not in state:
        raise TrainConfigError(f"{source} holds no model weights")
    payload = {k: v for k, v in state.items() if k != "sharded"} if whole else state["model"]
    save_atomic(payload, target)
    return ExportedWeights(
        source=source,
        to=target,
        step=state.get("step"),
        tensors=len(state["model"]),
        size=tensor_bytes(payload),
        whole=whole,
        ranks=state.get("world_size") if is_sharded(source) else None,
    )


def writable_target(to: Path, source: Path, follow_links: bool = False) -> Path:
    """Where to write: ``to``, or with ``follow_links`` (``--force``) the file a link there
    points to; a link is refused otherwise, as ``jiyu export -o`` and ``jiyu plot -o`` refuse
    one. A folder, a device, a pipe or a socket is refused (an atomic write replaces what is
    there: ``/dev/null`` would become a file), and so is the source itself."""
    to = to.expanduser()
    if to.is_symlink() and not follow_links:
        raise TrainConfigError(f"--to {to} is a symbolic link; pass --force to write to its target")
    target = Path(os.path.realpath(to))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise TrainConfigError(f"--to {to}: {error.strerror or error}") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise TrainConfigError(f"--to {to} is {file_kind(mode)}, not a file: refusing to write over it")
    if target == Path(os.path.realpath(source)) or Path(os.path.realpath(source)) in target.parents:
        raise TrainConfigError(f"--to {to} is the checkpoint being exported (or inside it)")
    return target


def run_checkpoints(run_id: str) -> list[tuple[int | None, Path]]:
    """The checkpoints of a run that still exist, oldest first: those its ``ckpt`` events
    record (wherever ``--ckpt-dir`` put them), else the newest in its own folder."""
    files = RunFiles.of(run_id)
    recorded: dict[Path, int | None] = {}
    for event in read_events(files.events)[0] if files.events.exists() else []:
        if event["kind"] == EventKind.CKPT and event.get("path"):
            path = Path(event["path"])
            recorded.pop(path, None)  # saved again: its place is the later one
            recorded[path] = event.get("step")
    found = [(step, path) for path, step in recorded.items() if is_checkpoint(path)]
    if not found and files.ckpt.is_dir():
        newest = newest_checkpoint(files.ckpt)
        found = [(None, newest)] if newest is not None else []
    return found


def checkpoint_of_run(run_id: str, step: int | None = None) -> Path:
    """The newest checkpoint of a run, or the one of ``step``."""
    found = run_checkpoints(run_id)
    if not found:
        raise TrainConfigError(f"run {run_id} has no checkpoint (it saved none, or they were removed)")
    if step is None:
        return found[-1][1]
    for saved, path in found:
        if saved == step:
            return path
    steps = ", ".join(str(s) for s, _ in found if s is not None) or "none recorded"
    raise TrainConfigError(f"run {run_id} has no checkpoint of step {step}; its checkpoints: steps {steps}")
