"""The processes of a run, found by the run id every launcher puts in their environment
(``JIYU_RUN_ID``): torchrun, its ranks, their data loader workers, and whatever a rank left
behind when its parent died (re-parented processes leave every process tree).

Here in ``core`` so that the run store, which marks a run ``lost`` only once nothing of it is
left, and the jobs' stop procedure find them the same way.
"""

from __future__ import annotations

import os

import psutil

from ..runs.files import RUN_ID_ENV


def tagged(run_id: str) -> list[psutil.Process]:
    """Every live process of ours that carries the run id, this one aside (a supervisor, or
    a rank that asks, carries the id too)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(RUN_ID_ENV) == run_id and alive(proc):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's bookkeeping is left)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def live_run_ids() -> set[str]:
    """The run ids carried by live processes of ours, in one pass over the process table."""
    found = set()
    for proc in psutil.process_iter():
        try:
            run_id = proc.environ().get(RUN_ID_ENV)
            if run_id and proc.pid != os.getpid() and alive(proc):
                found.add(run_id)
        except (psutil.Error, OSError):
            continue
    return found
