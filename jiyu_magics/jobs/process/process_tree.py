"""Stopping a job's processes, all of them, and checking that none is left.

torchrun starts each worker in its own session, so one ``killpg`` cannot reach them all, and
SIGKILL to torchrun's group orphans the workers (they keep running). So: snapshot the whole
tree first, SIGTERM every process group in it (torchrun then stops its workers cleanly), wait
for the grace period, SIGKILL whatever is left one by one, and verify against the process table.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Iterable

import psutil

from ...core.run_files import RUN_ID_ENV

KILL_WAIT_S = 5.0


@dataclass
class StopResult:
    found: int                                        # processes the stop was aimed at
    killed: list[int] = field(default_factory=list)   # pids that needed SIGKILL
    remaining: list[int] = field(default_factory=list)  # pids still alive at the end (should be none)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not self.remaining


def tree(root_pid: int | None) -> list[psutil.Process]:
    """The process and all its descendants, as they are now."""
    if not root_pid:
        return []
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tagged(run_id: str) -> list[psutil.Process]:
    """Every process of ours that carries the run id in its environment: it finds the
    processes that left the tree (re-parented after their parent died)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_ID_ENV) == run_id:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def leftovers(run_id: str) -> list[psutil.Process]:
    """The run's processes still alive, this one aside (a supervisor carries the run id too)."""
    return [p for p in tagged(run_id) if p.pid != os.getpid() and alive(p)]


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's bookkeeping is left)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def alive_pid(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def stop(procs: Iterable[psutil.Process], grace: float = 10.0, spare: Iterable[int] = ()) -> StopResult:
    """SIGTERM to every process group among ``procs``, SIGKILL to what outlives ``grace``.
    Processes in ``spare`` (e.g. the supervisor that records the outcome) are not signalled,
    nor are their groups, nor this process and its group."""
    started = time.monotonic()
    spare = {os.getpid(), *spare}
    spared_groups = {os.getpgrp(), *filter(None, map(_pgid, spare))}
    procs = _unique(p for p in procs if p.pid not in spare and alive(p))
    _signal_groups(procs, spared_groups, signal.SIGTERM)
    survivors = _wait(procs, grace)
    late = _unique(survivors + [c for p in survivors for c in _children(p)])
    killed = [p for p in late if p.pid not in spare and alive(p)]
    for proc in killed:
        _send(proc, signal.SIGKILL)
    remaining = _wait(killed, KILL_WAIT_S)
    killed = [p.pid for p in killed]
    return StopResult(len(procs), killed, [p.pid for p in remaining], time.monotonic() - started)


def stop_run(run_id: str, root_pid: int | None, grace: float = 10.0, spare: Iterable[int] = ()) -> StopResult:
    """The one way a run is stopped, whoever asks (its owner, ``jiyu stop``, the panel): the
    tree under ``root_pid`` as it is now plus every process tagged with the run id (workers
    torchrun no longer tracks), SIGTERM by process group, SIGKILL after ``grace``, verified."""
    return stop(tree(root_pid) + tagged(run_id), grace, spare)


def _signal_groups(procs: list[psutil.Process], spared_groups: set[int], sig: int) -> None:
    groups = {_pgid(p.pid) for p in procs} - spared_groups - {None}
    for group in groups:
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            continue
    for proc in procs:  # members of a spared group get the signal one by one
        if _pgid(proc.pid) in spared_groups:
            _send(proc, sig)


def _wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def _send(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.Error:
        pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return proc.children(recursive=True)
    except psutil.Error:
        return []


def _unique(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    seen: dict[int, psutil.Process] = {}
    for proc in procs:
        seen.setdefault(proc.pid, proc)
    return list(seen.values())
