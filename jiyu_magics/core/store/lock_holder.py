"""Who holds the run store's write lock, for the line that says the store is busy.

SQLite takes its locks with ``fcntl`` byte-range locks, which the kernel lists in
``/proc/locks`` with the pid and the file's inode. In WAL mode (the store's) a writer holds
byte 120 of the ``-shm`` file exclusively (``WAL_WRITE_LOCK``); in rollback mode it holds an
exclusive lock on the database file itself. A process holding one of those while this one
waits is the holder: "PID 4242 (python train.py) holds it" tells the user what to wait for or
end, where "database is locked" made a healthy store look broken.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..processes.info import command_line

LOCKS = "/proc/locks"
WAL_WRITE_BYTE = 120  # sqlite3 os_unix.c: WALINDEX_LOCK_OFFSET + WAL_WRITE_LOCK
COMMAND_CHARS = 80


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_dev


def _holds(line: str, shm: tuple[int, int] | None, db: tuple[int, int] | None) -> int | None:
    """The pid of one ``/proc/locks`` line when it is a write lock that keeps writers out."""
    fields = line.split()
    if "->" in fields or len(fields) < 8 or fields[3] != "WRITE":  # "->": a process waiting, not holding
        return None
    try:
        pid = int(fields[4])
        major, minor, inode = fields[5].split(":")
        start, end = int(fields[6]), (float("inf") if fields[7] == "EOF" else int(fields[7]))
        device = os.makedev(int(major, 16), int(minor, 16))
        key = (int(inode), device)
    except ValueError:
        return None
    if pid <= 0 or pid == os.getpid():
        return None
    if key == shm and start <= WAL_WRITE_BYTE <= end:
        return pid
    return pid if key == db else None


def write_lock_holders(path: Path) -> list[int]:
    """The pids holding ``path``'s write lock, as the kernel lists them (none where there is no
    ``/proc/locks`` or the holder lives in another PID namespace)."""
    shm, db = _inode(Path(f"{path}-shm")), _inode(path)
    try:
        with open(LOCKS, encoding="ascii", errors="replace") as locks:
            lines = locks.readlines()
    except OSError:
        return []
    pids = (_holds(line, shm, db) for line in lines)
    return sorted({pid for pid in pids if pid is not None})


def describe_holder(path: Path) -> str:
    """``PID 4242 (python train.py)`` or ``another process``: who to wait for."""
    pids = write_lock_holders(path)
    if not pids:
        return "another process"
    described = []
    for pid in pids:
        command = " ".join((command_line(pid) or "?").split())
        if len(command) > COMMAND_CHARS:
            command = command[: COMMAND_CHARS - 1] + "…"
        described.append(f"PID {pid} ({command})")
    return ", ".join(described)
