"""A process dies with its parent: ranks with their torchrun agent, torchrun with its owner.

Linux sends a chosen signal to a process when its parent dies (``prctl(PR_SET_PDEATHSIG)``),
so a ``kill -9`` of torchrun (as the OOM killer does it) or of the kernel that started it no
longer leaves ranks training with nobody to stop them. A rank gets SIGTERM: in ``fit`` it then
stops at a step with a checkpoint, like any stop. torchrun gets SIGKILL (``request_kill``),
and its ranks then get their SIGTERM: the parent's death signal comes once per thread of a
dying multi-threaded parent (Linux hands the child to the next live thread and signals again),
and torchrun, hit by a second SIGTERM while it shuts its workers down, skips stopping its log
tailers and then waits for them forever at exit (seen after a ``kill -9`` of a kernel under
load). A rank takes repeated SIGTERMs as one stop. Two gaps are closed by hand:

- the parent may die before the request takes hold: the parent seen before and after asking
  must be the same, and not the init process that adopts orphans (unless init is the launcher
  itself, as torchrun is in a Kubernetes pod), else the signal is sent at once;
- a rank stuck in a collective never runs its SIGTERM handler: a watch thread that sees the
  parent gone kills the process after ``grace`` seconds (it wakes once a second and does
  nothing else).

The request belongs to the thread that started the process: it must be a thread that lives as
long as its process (a main thread), or the signal comes when that thread ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_S = 1.0
ORPHAN_GRACE_S = 30.0  # an orphaned rank's time to checkpoint and exit before it is killed
LAUNCHER_MARKS = ("torch.distributed.run", "torchrun")


_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up once: not in a forked child of a threaded kernel


def request(sig: int = signal.SIGTERM) -> None:
    """Asks Linux to send ``sig`` to this process when its parent dies (in ``preexec_fn``
    after a fork, or in the process itself)."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def request_kill() -> None:
    """SIGKILL when the parent dies: for torchrun, whose ranks then stop on their own."""
    request(signal.SIGKILL)


def die_with_parent(grace: float = ORPHAN_GRACE_S) -> None:
    """SIGTERM when the parent dies, SIGKILL ``grace`` seconds later if still alive; at once
    when the parent is already gone."""
    parent = os.getppid()
    request(signal.SIGTERM)
    orphaned = os.getppid() != parent or (parent == 1 and not _init_is_a_launcher())
    watched = None if orphaned else parent
    threading.Thread(target=_watch, args=(watched, grace), name="jiyu-parent-watch", daemon=True).start()
    if orphaned:
        os.kill(os.getpid(), signal.SIGTERM)


def _watch(parent: int | None, grace: float) -> None:
    while parent is not None and os.getppid() == parent:
        time.sleep(WATCH_S)
    time.sleep(grace)
    os.kill(os.getpid(), signal.SIGKILL)


def _init_is_a_launcher() -> bool:
    """Whether process 1 is torchrun itself (a container whose command is torchrun) rather
    than an init that adopted us after our parent died."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            command = f.read().decode(errors="replace")
    except OSError:
        return True  # cannot tell: never kill a rank on a guess
    return any(mark in command for mark in LAUNCHER_MARKS)
