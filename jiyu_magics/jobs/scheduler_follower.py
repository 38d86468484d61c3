"""The owner of the runs a scheduler holds (Slurm, Kubernetes) on this host: one detached
process, ``python -m jiyu_magics.jobs.scheduler_follower``, that asks each scheduler about its
active runs every ``POLL_S`` seconds and records what it says (queued with the scheduler's
reason, running, the end by the one rule) through the run lifecycle. It is the only process
that writes a scheduled run's state while it runs, so listings, ``resolve``, the REST API and
``/metrics`` only read.

Whoever hands a run to a scheduler starts it (``ensure_running``), and so does every run
owner's upkeep step (``jobs.upkeep``): a follower killed with its login session comes back at
the next submit or with the Jupyter server's sampler. One per store and host: an exclusive
``flock`` on ``scheduler-follower.lock`` in the jiyu home, whose text is the holder's pid. It
exits once no scheduled run of this host has been active for ``IDLE_EXIT_S`` seconds, or when
its store is gone.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from ..core.processes.info import process_alive
from ..core.runs.files import jiyu_home, store_path
from ..core.runs.model import RunKind
from ..core.runs.states import TransitionRefused
from ..core.store.database import StoreUnusable
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from .backends import SCHEDULED_BACKENDS

LOCK_FILE = "scheduler-follower.lock"
POLL_S = 3.0
IDLE_EXIT_S = 15.0


def lock_path(home: Path | None = None) -> Path:
    return (home or jiyu_home()) / LOCK_FILE


def followed(run: Run, host: str) -> bool:
    return run.backend in SCHEDULED_BACKENDS and run.active and run.host == host


def running_pid(home: Path | None = None) -> int | None:
    """The pid of this home's follower, or None when none holds the lock."""
    path = lock_path(home)
    try:
        with open(path, "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                text = lock.read().strip()
                return int(text) if text.isdigit() else None
            fcntl.flock(lock, fcntl.LOCK_UN)
            return None
    except OSError:
        return None


def ensure_running() -> int | None:
    """Starts the follower unless one runs (a second one started in a race finds the lock held
    and exits at once); its pid, or None when it could not be started."""
    pid = running_pid()
    if pid is not None:
        return pid
    log = jiyu_home() / "scheduler-follower.log"
    try:
        with open(log, "ab") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "jiyu_magics.jobs.scheduler_follower"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
    except OSError:
        return None
    return child.pid


def follow_all(store: RunStore) -> int:
    """One look at every active scheduled run of this host; how many there were."""
    from .rank_placement import SchedulerUnreachable
    from .scheduled_runs import owner_of

    runs = [run for run in store.list(include_finished=False, annotate=False) if followed(run, store.host)]
    for run in runs:
        try:
            owner = owner_of(run, store)
            if owner.follow().active and _kernel_gone(run):
                owner.kill()  # the allocation of a pool no kernel drives: cancelled, pending or not
                owner.end(error=f"its kernel (pid {run.owner_pid}) is gone: nothing drives the ranks pool")
            store.update(run.id, polled=time.time())
        except (SchedulerUnreachable, TransitionRefused):
            continue  # asked again next round; an end someone else recorded stands
    return len(runs)


def _kernel_gone(run: Run) -> bool:
    """A ranks pool lives for its kernel (its owner, on this host): once the kernel is gone its
    job is ended here, also while Slurm still holds it pending (its ranks, once connected, end by
    themselves when the kernel goes: ``jobs.ranks.channel``)."""
    return (
        run.kind == RunKind.RANKS and run.owner_pid is not None and not process_alive(run.owner_pid, run.owner_started)
    )


def main() -> int:
    home = jiyu_home()
    with open(lock_path(home), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another follower holds this home
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        idle_since = time.monotonic()
        while store_path(home).exists():
            try:
                if follow_all(RunStore()):
                    idle_since = time.monotonic()
            except StoreUnusable as problem:
                print(f"[jiyu] {time.strftime('%H:%M:%S')} {problem}", flush=True)
            if time.monotonic() - idle_since >= IDLE_EXIT_S:
                break
            time.sleep(POLL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
