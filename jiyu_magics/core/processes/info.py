"""Cheap facts about other processes, read straight from ``/proc`` where it exists: a parent
pid, a chain of ancestors, one environment variable; and whether a recorded process (a pid
and its start time) is still that same process.

Mapping every GPU process to its owner happens on each panel poll; ``psutil.Process`` objects
cost a ``create_time`` read each and ``parents()`` builds one per ancestor, several times what
one small file read costs. Elsewhere (no ``/proc``) psutil answers.
"""

from __future__ import annotations

import os
import time

import psutil

PROC = "/proc"
HAS_PROC = os.path.isdir(os.path.join(PROC, "self"))
PARENT_TTL_S = 1.0  # a parent read is reused this long: one snapshot asks for the same chains many times
_parents: dict[int, tuple[int | None, float]] = {}


def parent_pid(pid: int) -> int | None:
    now = time.monotonic()
    known = _parents.get(pid)
    if known is not None and now - known[1] < PARENT_TTL_S:
        return known[0]
    if len(_parents) > 4096:
        _parents.clear()
    parent = _read_parent(pid)
    _parents[pid] = (parent, now)
    return parent


def _read_parent(pid: int) -> int | None:
    if not HAS_PROC:
        try:
            return psutil.Process(pid).ppid()
        except (psutil.Error, OSError):
            return None
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]) if len(fields) > 1 else None


def ancestors(pid: int, depth: int) -> list[int]:
    """The pid itself and up to ``depth`` parents, nearest first (init and the idle task not
    included)."""
    chain = [pid]
    while len(chain) <= depth:
        parent = parent_pid(chain[-1])
        if not parent or parent == 1 or parent in chain:
            break
        chain.append(parent)
    return chain


def environ_value(pid: int, name: str) -> str | None:
    """One variable of another process's environment (None: unset, gone, or not ours to read)."""
    if not HAS_PROC:
        try:
            return psutil.Process(pid).environ().get(name)
        except (psutil.Error, OSError):
            return None
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def command_line(pid: int) -> str | None:
    """The command line, or None when the pid is not in our PID namespace (NVML reports host
    pids inside containers) or has none (a zombie)."""
    if not HAS_PROC:
        try:
            return " ".join(psutil.Process(pid).cmdline()) or None
        except (psutil.Error, OSError):
            return None
    try:
        with open(f"{PROC}/{pid}/cmdline", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return " ".join(part.decode(errors="replace") for part in data.split(b"\0") if part) or None


def process_uid(pid: int) -> int | None:
    """The real uid a process runs as (readable for every process, unlike its environment)."""
    try:
        return os.stat(f"{PROC}/{pid}").st_uid if HAS_PROC else psutil.Process(pid).uids().real
    except (OSError, psutil.Error):
        return None


def process_start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def process_alive(pid: int | None, started: float | None) -> bool:
    """The process is alive and is the same process (not a recycled pid)."""
    if not pid:
        return False
    now_started = process_start_time(pid)
    if now_started is None:
        return False
    if started is not None and abs(now_started - started) > 1.0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
