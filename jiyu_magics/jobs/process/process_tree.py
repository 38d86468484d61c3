"""Stopping a run's processes, all of them, and checking that none is left.

The stop is aimed at the ranks, not at torchrun: each rank process gets SIGTERM, checkpoints
at its next step (or, outside ``fit``, ends its script where it is) and exits with status 0;
torchrun sees its workers succeed and exits 0 by itself. Signalling torchrun instead makes it
print a traceback, exit 1 and, under ``--max-restarts``, it may restart the workers it was
asked to stop. Signals go to processes, not to process groups: a rank's group also holds its
data loader workers, which die with their rank and must not die before it.

Ranks that appear during the grace (starting, or restarted) get SIGTERM too. After the grace
whatever is left (torchrun, a rank stuck in a collective, a process that left every tree
after its parent died) gets SIGKILL, one by one, and the process table is checked.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from ...core.processes.run_processes import AGENT_MARKS, POOL_FORK_SERVER_NAME, POOL_SUPERVISOR_MARK, alive, tagged
from .torchrun_command import WORKER_MODULE

KILL_WAIT_S = 5.0
RESCAN_S = 0.5  # how often the stop looks for processes of the run that were not there before

__all__ = ["StopResult", "alive", "alive_pid", "leftovers", "stop", "stop_run", "tagged", "tree"]


@dataclass
class StopResult:
    found: int  # processes the stop was aimed at
    killed: list[int] = field(default_factory=list)  # pids that needed SIGKILL
    remaining: list[int] = field(default_factory=list)  # pids still alive at the end (should be none)
    seconds: float = 0.0
    pids: list[int] = field(default_factory=list)  # the processes the stop was aimed at

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


def leftovers(run_id: str) -> list[psutil.Process]:
    """The run's processes still alive (this one aside)."""
    return tagged(run_id)


def alive_pid(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def stop_run(run_id: str, root_pid: int | None, grace: float = 10.0, spare: Iterable[int] = ()) -> StopResult:
    """The one way a run is stopped, whoever asks (its owner, ``jiyu stop``, the panel): the
    tree under ``root_pid`` plus every process tagged with the run id; SIGTERM to the ranks
    (and to strays), SIGKILL to what is left after ``grace``, verified. ``spare`` (the
    supervisor that records the end) is never signalled."""
    started, spare = time.monotonic(), {os.getpid(), *spare}
    found: dict[int, psutil.Process] = {}
    signalled: set[int] = set()
    deadline = started + grace
    while True:
        for proc in _of_run(run_id, root_pid, spare):
            found.setdefault(proc.pid, proc)
        if grace > 0:
            signalled |= _send_all(
                [p for p in first_to_stop(list(found.values())) if p.pid not in signalled], signal.SIGTERM
            )
        left = _wait(list(found.values()), min(RESCAN_S, max(0.0, deadline - time.monotonic())))
        if time.monotonic() >= deadline or not (left or _of_run(run_id, root_pid, spare)):
            break
    return _kill_the_rest(list(found.values()), spare, started)


def first_to_stop(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Who gets the SIGTERM: each rank (the top-most process running the rank worker, or forked
    by a ranks pool's supervisor; the processes a rank forked run the same command line), and
    strays (processes of the run outside any rank, not an agent). Not torchrun, the pool's
    supervisor or its fork server, not the ranks' own children."""
    commands = {p.pid: _command(p) for p in procs}
    marked = {pid for pid, cmd in commands.items() if any(mark in part for part in cmd for mark in AGENT_MARKS)}
    supervised = {p.pid for p in procs if _is_pool_rank(p, commands)}
    agents = marked - supervised
    workers = {pid for pid, cmd in commands.items() if WORKER_MODULE in cmd and pid not in agents} | supervised
    ranks = [p for p in procs if p.pid in workers and _ppid(p) not in workers]
    rank_pids = {p.pid for p in ranks}
    agents |= {ppid for p in ranks if (ppid := _ppid(p)) is not None}
    strays = [p for p in procs if p.pid not in workers and p.pid not in agents and not rank_pids & set(_ancestors(p))]
    return ranks + strays


def _is_pool_rank(proc: psutil.Process, commands: dict[int, list[str]]) -> bool:
    """Forked by a pool's fork server (or by such a rank): the supervisor's command line, under
    a process with that command line, and not the fork server itself (its name says it)."""
    if not any(POOL_SUPERVISOR_MARK in part for part in commands.get(proc.pid, [])):
        return False
    if _name(proc) == POOL_FORK_SERVER_NAME:
        return False
    parent = _ppid(proc)
    return parent is not None and any(POOL_SUPERVISOR_MARK in part for part in _parent_command(parent, commands))


def _parent_command(pid: int, commands: dict[int, list[str]]) -> list[str]:
    if pid in commands:
        return commands[pid]
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def stop(procs: Iterable[psutil.Process], grace: float = 10.0, spare: Iterable[int] = ()) -> StopResult:
    """SIGTERM to each of ``procs``, SIGKILL to what outlives ``grace``, verified: for
    processes that are not a run's ranks (a supervisor that does not report)."""
    started, spare = time.monotonic(), {os.getpid(), *spare}
    procs = _unique(p for p in procs if p.pid not in spare and alive(p))
    _send_all(procs, signal.SIGTERM)
    _wait(procs, grace)
    return _kill_the_rest(procs, spare, started)


def _of_run(run_id: str, root_pid: int | None, spare: set[int]) -> list[psutil.Process]:
    return _unique(p for p in tree(root_pid) + tagged(run_id) if p.pid not in spare and alive(p))


def _kill_the_rest(procs: list[psutil.Process], spare: set[int], started: float) -> StopResult:
    survivors = [p for p in procs if alive(p)]
    late = _unique(survivors + [c for p in survivors for c in _children(p)])
    killed = [p for p in late if p.pid not in spare and alive(p)]
    _send_all(killed, signal.SIGKILL)
    remaining = _wait(killed, KILL_WAIT_S)
    return StopResult(
        len(procs),
        [p.pid for p in killed],
        [p.pid for p in remaining],
        time.monotonic() - started,
        [p.pid for p in procs],
    )


def _wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left


def _send_all(procs: Iterable[psutil.Process], sig: int) -> set[int]:
    sent = set()
    for proc in procs:
        try:
            proc.send_signal(sig)
            sent.add(proc.pid)
        except psutil.Error:
            pass
    return sent


def _command(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _name(proc: psutil.Process) -> str | None:
    try:
        return proc.name()
    except psutil.Error:
        return None


def _ppid(proc: psutil.Process) -> int | None:
    try:
        return proc.ppid()
    except psutil.Error:
        return None


def _ancestors(proc: psutil.Process) -> list[int]:
    try:
        return [p.pid for p in proc.parents()]
    except psutil.Error:
        return []


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
