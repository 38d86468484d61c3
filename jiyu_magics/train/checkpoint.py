"""Atomic, checksummed checkpoints: a reader (a resume, another rank, a crash) never sees half a
file, and a file whose bytes changed on disk is refused rather than loaded with a wrong weight.

Each save writes a temporary file in the same folder, fsyncs it, ``os.replace``s it over the
final name and fsyncs the folder. A writer killed mid-save leaves only a temporary file, which
``newest_checkpoint`` ignores and the next save removes; the previous checkpoint stays intact.

A checkpoint is a file (``step-00000120.pt``, one process wrote it) or, under ``--strategy
fsdp``, a folder (``step-00000120.dcp``: a torch.distributed.checkpoint with a shard per rank,
see ``sharded_checkpoint``), made atomic the same way (names, discovery and removal of both:
``checkpoint_files``). ``load_checkpoint`` reads either whole into one process.

The SHA-256 of a file's bytes is taken as torch writes them (no second pass) and kept beside it
in ``sha256sum``'s format (``step-00000120.pt.sha256``: ``sha256sum -c`` checks it too; in a
sharded checkpoint, each rank's shard's, DCP's metadata's and the state file's:
``checkpoint_sums``). Loading verifies them; a checkpoint without them (saved by an older jiyu,
or a crash between the two renames) loads as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import torch

from .checkpoint_files import STATE_FILE, checksum_path, fsync_folder, is_sharded, remove_stale_temps, temp_name
from .checkpoint_files import newest_checkpoint as newest_checkpoint  # where callers have always found it
from .checkpoint_sums import HashingWriter, damage, file_damage, sum_line
from .train_errors import TrainConfigError

FORMAT = "jiyu-checkpoint/1"
EARLIER = "resume from an earlier checkpoint"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a read-only folder). torch's own error
    for a full disk is "unexpected pos 9216 vs 9110", with the real cause two exceptions deep:
    this says what happened, where, and what was kept, in one line."""

    def _render_traceback_(self) -> list[str]:  # IPython: the line, not the engine's frames
        return [f"CheckpointWriteError: {self}"]


def save_atomic(state: dict[str, Any], path: Path | str) -> Path:
    path = Path(path)
    temp = temp_name(path, os.getpid())
    sums = checksum_path(path)
    sums_temp = temp_name(sums, os.getpid())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a folder that cannot be made: one line too
        remove_stale_temps(path.parent)
        with open(temp, "wb") as f:
            hashing = HashingWriter(f)
            torch.save(state, hashing)  # type: ignore[arg-type]  # a writable binary file: write and flush
            f.flush()
            os.fsync(f.fileno())
        sums_temp.write_text(sum_line(hashing.digest.hexdigest(), path.name))
        sums.unlink(missing_ok=True)  # a checkpoint saved again under its name: never beside the old sum
        os.replace(temp, path)
        os.replace(sums_temp, sums)
    except BaseException as error:
        for leftover in (temp, sums_temp):
            with contextlib.suppress(OSError):  # no folder (or a file in its place): no temp file either
                leftover.unlink()
        cause = os_error_in(error)
        if cause is None:
            raise
        raise CheckpointWriteError(cause.errno, _write_failure(cause, path, state)) from None
    fsync_folder(path.parent)
    return path


def checkpoint_folder_usable(folder: Path) -> None:
    """``--ckpt-dir`` checked before training starts: a folder that cannot be made or written
    is refused in one line at once, not after the first epoch's training is lost with it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as error:
        raise TrainConfigError(
            f"ckpt_dir must be a folder checkpoints can be written to; {folder}: {error.strerror or error}"
        ) from None
    if not writable:
        raise TrainConfigError(f"ckpt_dir must be a folder checkpoints can be written to; {folder}: Permission denied")


def run_folder_usable(root: Path) -> None:
    """Without ``--ckpt-dir`` checkpoints go to the run's folder under ``root`` (the home's
    ``runs``): one that cannot be written (a read-only home) is refused before training
    starts, with what to do instead."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        writable = os.access(root, os.W_OK | os.X_OK)
        reason = "Permission denied"
    except OSError as error:
        writable, reason = False, error.strerror or str(error)
    if not writable:
        raise TrainConfigError(
            f"checkpoints go to the run's folder under {root}, which cannot be written ({reason}): "
            "pass --ckpt-dir DIR on a disk you can write, or --no-ckpt"
        )


def os_error_in(error: BaseException | None) -> OSError | None:
    """The OSError behind a failed save, however deep torch's writer wrapped it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno is not None:
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _write_failure(cause: OSError, path: Path, state: dict[str, Any]) -> str:
    return write_failure(cause, path, tensor_bytes(state))


def write_failure(cause: OSError, path: Path, needs: int) -> str:
    """One line: what could not be written, where, and (a full disk) how much it needed."""
    folder = path.parent
    if cause.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(folder).free
        return (
            f"cannot write checkpoint {path.name}: no space left on the disk of {_mount_of(folder)} "
            f"({_mib(free)} free, the checkpoint needs about {_mib(needs)}) for {folder}; "
            "free some space or pass --ckpt-dir on a larger disk"
        )
    return f"cannot write checkpoint {path}: {cause.strerror or cause}"


def tensor_bytes(value: Any) -> int:
    """The bytes of every tensor in a (nested) state: about what its file will take."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def _mount_of(folder: Path) -> Path:
    folder = folder.resolve()
    while not os.path.ismount(folder) and folder.parent != folder:
        folder = folder.parent
    return folder


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def load_checkpoint(
    path: Path | str,
    map_location: Any = "cpu",
    parts: set[str] | None = None,
    verified: bool = False,
    advice: str = EARLIER,
) -> dict[str, Any]:
    """A checkpoint's contents, whole, in this process; a sharded checkpoint's shards are put
    together (full tensors, on the CPU), only its ``parts`` (``{"model"}``) when given. Every
    file's checksum is verified first, unless the caller did (``verified``): a damaged one is
    refused in one line ending with ``advice``. A file that is not a jiyu checkpoint (a pickled
    model, a truncated download) is bad input, said in one line, not a traceback from
    ``torch.load``."""
    if not verified:
        verify_checkpoint(path, advice)
    if is_sharded(Path(path)):
        return {**load_state_file(path, verified=True), **_load_sharded_tensors(Path(path), parts)}
    return _load_file(path, map_location, verified=True)


def load_state_file(path: Path | str, verified: bool = False) -> dict[str, Any]:
    """What a checkpoint holds beside the model and optimizer (step, position, RNG, ...): a
    sharded checkpoint's ``STATE_FILE``, or a file checkpoint read whole."""
    path = Path(path)
    if is_sharded(path):
        return _load_file(path / STATE_FILE, "cpu", name=path, verified=verified)
    return _load_file(path, "cpu", verified=verified)


def verify_checksum(path: Path | str, name: Path | str | None = None) -> None:
    """``TrainConfigError`` when the file's SHA-256 differs from the one saved beside it."""
    try:
        problem = file_damage(Path(path), required=False, inside=name is not None)
    except OSError as error:
        raise TrainConfigError(f"cannot read checkpoint {name or path}: {error.strerror or error}") from None
    if problem:
        raise TrainConfigError(f"checkpoint {name or path} is damaged: {problem}; {EARLIER}")


def verify_checkpoint(path: Path | str, advice: str = EARLIER) -> None:
    """``TrainConfigError`` when any file of the checkpoint (each shard of a sharded one) is
    damaged; ``advice`` ends the line."""
    problem = damage(Path(path))
    if problem:
        raise TrainConfigError(f"{problem}; {advice}")


def _load_file(
    path: Path | str, map_location: Any, name: Path | str | None = None, verified: bool = False
) -> dict[str, Any]:
    """One checkpoint file, its checksum verified first (unless the caller did): a file whose
    bytes changed on disk is bad input, said in one line, never a model with a wrong weight."""
    if not verified:
        verify_checksum(path, name)
    name = name or path
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as error:
        raise TrainConfigError(f"{name} is not a jiyu checkpoint ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise TrainConfigError(f"{name} is not a jiyu checkpoint")
    return state


def _load_sharded_tensors(path: Path, parts: set[str] | None) -> dict[str, Any]:
    """Model and optimizer of a sharded checkpoint as one process holds them: full tensors in the
    nested layout they were saved in, whatever number of ranks wrote the shards. This is what
    ``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` does (the same private
    loader and planner), without writing the file."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    tensors: dict[str, Any] = {}
    try:
        _load_state_dict(
            tensors, storage_reader=FileSystemReader(path), planner=_EmptyStateDictLoadPlanner(keys=parts), no_dist=True
        )
    except (Exception, _dcp_error()) as error:
        raise TrainConfigError(f"{path} is not a readable sharded checkpoint ({failure_line(error)})") from None
    return tensors


def _dcp_error() -> type[BaseException]:
    from torch.distributed.checkpoint import CheckpointException

    return CheckpointException


def failure_line(error: BaseException) -> str:
    """The first line of what went wrong. DCP collects each rank's exception in a
    ``CheckpointException`` whose own text is a list of ranks and tracebacks: its first one."""
    failures = dcp_failures(error)
    error = failures[0] if failures else error
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def dcp_failures(error: BaseException) -> list[BaseException]:
    """The ranks' exceptions a DCP ``CheckpointException`` carries (``failures``: rank ->
    (exception, traceback summary)), in rank order; none for any other error."""
    failures = getattr(error, "failures", None)
    if not isinstance(failures, dict):
        return []
    return [f[0] if isinstance(f, tuple) else f for _, f in sorted(failures.items())]
