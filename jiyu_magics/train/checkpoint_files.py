"""Checkpoints as files and folders: their names, which are complete, the newest, removal.

A checkpoint is a file (``step-00000120.pt``) or, under ``--strategy fsdp``, a folder
(``step-00000120.dcp``: a torch.distributed.checkpoint with a shard per rank and ``STATE_FILE``).
Both are written under a hidden temporary name carrying the writer's host and pid and renamed
once complete, so what carries a checkpoint's name is whole; a temporary of a writer on this host
that is gone is removed when seen. Nothing here reads a checkpoint's contents, so this module
needs no torch (the CLI resolves and refuses before it loads torch).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path

import psutil

SUFFIX = ".pt"
SHARDED_SUFFIX = ".dcp"  # a folder: torch.distributed.checkpoint's files and STATE_FILE
STATE_FILE = "jiyu-state.pt"  # in a sharded checkpoint: everything that is not model or optimizer
TEMP_MARK = ".tmp-"
CHECKSUM_SUFFIX = ".sha256"  # beside a checkpoint file: its SHA-256, in sha256sum's format


def checkpoint_name(step: int, label: str = "", sharded: bool = False) -> str:
    return f"{label}step-{step:08d}{SHARDED_SUFFIX if sharded else SUFFIX}"


def temp_name(path: Path, pid: int) -> Path:
    """Where a checkpoint is written before it is complete: hidden, and named by its writer's
    host and pid, so a temporary of a writer that died is known and removed (``remove_stale_temps``)."""
    return path.with_name(f".{path.name}{TEMP_MARK}{socket.gethostname()}-{pid}")


def checksum_path(path: Path | str) -> Path:
    """Where a checkpoint file's SHA-256 is kept (``step-00000120.pt.sha256``)."""
    return Path(f"{path}{CHECKSUM_SUFFIX}")


def is_sharded(path: Path) -> bool:
    """A complete sharded checkpoint: a folder with DCP's metadata and jiyu's state file."""
    return path.is_dir() and (path / STATE_FILE).is_file() and (path / ".metadata").is_file()


def is_checkpoint(path: Path) -> bool:
    """Something a resume can start from: a checkpoint file or a complete sharded checkpoint."""
    return path.is_file() or is_sharded(path)


def saved_at(path: Path) -> int:
    """When a checkpoint was completed (ns): a file's mtime, a sharded checkpoint's state file's."""
    return (path / STATE_FILE if path.is_dir() else path).stat().st_mtime_ns


def checkpoints_in(folder: Path, label: str = "") -> list[Path]:
    """The complete checkpoints in ``folder`` (of the call with ``label``), files and folders,
    temporary ones excluded."""
    files = [p for p in folder.glob(f"{label}step-*{SUFFIX}") if p.is_file()]
    folders = [p for p in folder.glob(f"{label}step-*{SHARDED_SUFFIX}") if is_sharded(p)]
    return files + folders


def newest_checkpoint(folder: Path | str) -> Path | None:
    """The most recently completed checkpoint in ``folder`` (temporary files and folders
    excluded; those of writers that died mid-save are removed while we look)."""
    found = complete_checkpoints(folder)
    return found[0] if found else None


def complete_checkpoints(folder: Path | str) -> list[Path]:
    """Every complete checkpoint in ``folder``, whatever call wrote it, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    remove_stale_temps(folder)
    return newest_first(p for p in folder.glob("*") if not p.name.startswith(".") and _looks_complete(p))


def newest_first(paths: Iterable[Path]) -> list[Path]:
    """Checkpoints by when each was completed, the newest first."""
    return sorted(paths, key=lambda p: (saved_at(p), p.name), reverse=True)


def _looks_complete(path: Path) -> bool:
    return (path.suffix == SUFFIX and path.is_file()) or (path.suffix == SHARDED_SUFFIX and is_sharded(path))


def remove_stale_temps(folder: Path) -> None:
    """Temporary files and folders of writers that died mid-save. Only this host's: a folder
    shared by several nodes (a Slurm job's checkpoints read from the login node) holds other
    hosts' temporaries, whose pids mean nothing here, and one may be a save in progress."""
    here = socket.gethostname()
    for temp in folder.glob(f".*{TEMP_MARK}*"):
        host, _, pid = temp.name.rsplit(TEMP_MARK, 1)[-1].rpartition("-")
        if host not in ("", here):
            continue
        if not (pid.isdigit() and psutil.pid_exists(int(pid))):
            remove_path(temp)


def remove_checkpoint(path: Path) -> None:
    """A rotated-out checkpoint. A folder is renamed to a temporary name first, so a removal
    cut short never leaves a partial folder under a checkpoint's name."""
    if path.is_dir():
        doomed = temp_name(path, os.getpid())
        try:
            os.replace(path, doomed)
        except OSError:
            return
        remove_path(doomed)
    else:
        path.unlink(missing_ok=True)
        checksum_path(path).unlink(missing_ok=True)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
