"""Atomic checkpoints: a reader (a resume, another rank, a crash) never sees half a file.

Each save writes a temporary file in the same folder, fsyncs it, ``os.replace``s it over the
final name and fsyncs the folder. A writer killed mid-save leaves only a temporary file, which
``newest_checkpoint`` ignores and the next save removes; the previous checkpoint stays intact.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import psutil
import torch

from .train_errors import TrainConfigError

FORMAT = "jiyu-checkpoint/1"
SUFFIX = ".pt"
TEMP_MARK = ".tmp-"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a read-only folder). torch's own error
    for a full disk is "unexpected pos 9216 vs 9110", with the real cause two exceptions deep:
    this says what happened, where, and what was kept, in one line."""

    def _render_traceback_(self) -> list[str]:  # IPython: the line, not the engine's frames
        return [f"CheckpointWriteError: {self}"]


def checkpoint_name(step: int, label: str = "") -> str:
    return f"{label}step-{step:08d}{SUFFIX}"


def save_atomic(state: dict[str, Any], path: Path | str) -> Path:
    path = Path(path)
    temp = path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a folder that cannot be made: one line too
        remove_stale_temps(path.parent)
        with open(temp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as error:
        with contextlib.suppress(OSError):  # no folder (or a file in its place): no temp file either
            temp.unlink()
        cause = _os_error_in(error)
        if cause is None:
            raise
        raise CheckpointWriteError(cause.errno, _write_failure(cause, path, state)) from None
    _fsync_folder(path.parent)
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


def _os_error_in(error: BaseException | None) -> OSError | None:
    """The OSError behind a failed save, however deep torch's writer wrapped it."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno is not None:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _write_failure(cause: OSError, path: Path, state: dict[str, Any]) -> str:
    folder = path.parent
    if cause.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(folder).free
        return (
            f"cannot write checkpoint {path.name}: no space left on the disk of {_mount_of(folder)} "
            f"({_mib(free)} free, the checkpoint needs about {_mib(tensor_bytes(state))}) for {folder}; "
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


def load_checkpoint(path: Path | str, map_location: Any = "cpu") -> dict[str, Any]:
    """A checkpoint's contents; a file that is not a jiyu checkpoint (a pickled model, a
    truncated download) is bad input, said in one line, not a traceback from ``torch.load``."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as error:
        raise TrainConfigError(f"{path} is not a jiyu checkpoint ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise TrainConfigError(f"{path} is not a jiyu checkpoint")
    return state


def newest_checkpoint(folder: Path | str) -> Path | None:
    """The most recently completed checkpoint in ``folder`` (temporary files excluded; those
    of writers that died mid-save are removed while we look)."""
    if Path(folder).is_dir():
        remove_stale_temps(Path(folder))
    candidates = [p for p in Path(folder).glob(f"*{SUFFIX}") if not p.name.startswith(".")]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name))


def remove_stale_temps(folder: Path) -> None:
    """Temporary files of writers that died mid-save."""
    for temp in folder.glob(f".*{TEMP_MARK}*"):
        pid = temp.name.rsplit(TEMP_MARK, 1)[-1]
        if not (pid.isdigit() and psutil.pid_exists(int(pid))):
            temp.unlink(missing_ok=True)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointKeeper:
    """Saves this call's checkpoints and keeps only the newest ``keep`` of them."""

    def __init__(self, folder: Path, keep: int, label: str = ""):
        self.folder, self.keep, self.label = Path(folder), keep, label
        self.saved: list[Path] = []
        self.last_step: int | None = None  # the step of ``last``

    def save(self, state: dict[str, Any], step: int, write: bool = True) -> Path:
        """Saves (rank 0) or only records (other ranks: the same paths, for their results)."""
        path = self.folder / checkpoint_name(step, self.label)
        if write:
            try:
                save_atomic({"format": FORMAT, **state}, path)
            except CheckpointWriteError as error:
                kept = f"; the last checkpoint, {self.last}, is kept" if self.last else ""
                raise CheckpointWriteError(error.errno, f"{error.strerror}{kept}") from None
        if path in self.saved:
            self.saved.remove(path)
        self.saved.append(path)
        self.last_step = step
        while len(self.saved) > self.keep:
            old = self.saved.pop(0)
            if write:
                old.unlink(missing_ok=True)
        return path

    @property
    def last(self) -> Path | None:
        return self.saved[-1] if self.saved else None
