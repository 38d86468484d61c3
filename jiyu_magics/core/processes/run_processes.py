"""The processes of a run, found by the run id every launcher puts in their environment
(``JIYU_RUN_ID``): torchrun, its ranks, their data loader workers, and whatever a rank left
behind when its parent died (re-parented processes leave every process tree).

Not every process carrying the id is the run. The run is its torchrun agent and its ranks
(``of_the_run``); a helper a notebook started (``subprocess.Popen(['sleep', '300'])``) carries
the id too, but once the ranks and the run's owner are gone it is a leftover: reported, ended
by ``jiyu stop``, never holding the run's GPUs.

Here in ``core`` so that the run store, which marks a run ``lost`` only once nothing of the
run is left, and the jobs' stop procedure find them the same way.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import psutil

from ..runs.files import RUN_ID_ENV, RunFiles
from .info import process_alive

# command-line marks of torchrun's agent and of a rank (``jobs.process.rank_worker``, which
# every launcher runs: jobs, ``%%train --nproc``, ranks pools); a rank's forked data loader
# workers carry the same command line and die with it. A local ranks pool's supervisor is its
# agent; its ranks are forked by its fork server, and both carry its command line
# (``ranks.fork_server``). The fork server's process name tells it from a rank.
POOL_SUPERVISOR_MARK = "jiyu_magics.ranks.supervisor"
POOL_FORK_SERVER_NAME = "jiyu-pool-forks"
AGENT_MARKS = ("torch.distributed.run", "torchrun", POOL_SUPERVISOR_MARK)
RANK_MARK = "jiyu_magics.jobs.process.rank_worker"


def tagged(run_id: str) -> list[psutil.Process]:
    """Every live process of ours that carries the run id, this one aside (a supervisor, or
    a rank that asks, carries the id too)."""
    return carried().get(run_id, [])


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie has exited; only its parent's bookkeeping is left)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def carried() -> dict[str, list[psutil.Process]]:
    """Run id → the live processes of ours carrying it (this one aside), in one pass over the
    process table."""
    found: dict[str, list[psutil.Process]] = defaultdict(list)
    for proc in psutil.process_iter():
        try:
            run_id = proc.environ().get(RUN_ID_ENV)
            if run_id and proc.pid != os.getpid() and alive(proc):
                found[run_id].append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def live_run_ids() -> set[str]:
    """The run ids of which torchrun or a rank still lives (``of_the_run``), in one pass."""
    return {run_id for run_id, procs in carried().items() if of_the_run(run_id, procs)}


def of_the_run(run_id: str, procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` (carrying ``run_id``) that are the run itself: its torchrun agent or a
    rank, by command line or by the pid and start time its rank record names. The others are
    leftovers once the run's owner is gone."""
    ranks = None
    body = []
    for proc in procs:
        try:
            command = proc.cmdline()
        except (psutil.Error, OSError):
            continue
        if any(mark in part for part in command for mark in (*AGENT_MARKS, RANK_MARK)):
            body.append(proc)
            continue
        if ranks is None:
            ranks = recorded_ranks(run_id)
        if proc.pid in ranks:
            body.append(proc)
    return body


def leftovers(run_id: str, procs: list[psutil.Process] | None = None) -> list[psutil.Process]:
    """The processes carrying the run id that are not the run (``of_the_run``)."""
    procs = tagged(run_id) if procs is None else procs
    body = {p.pid for p in of_the_run(run_id, procs)}
    return [p for p in procs if p.pid not in body]


def recorded_ranks(run_id: str) -> set[int]:
    """The pids of the run's ranks still alive by their records (``runs/<id>/ranks/*.json``,
    written by each rank: its pid and start time, so a recycled pid is not taken for it)."""
    pids = set()
    for path in (RunFiles.of(run_id).root / "ranks").glob("*.json"):
        try:
            record = json.loads(path.read_text())
            if record.get("ended") is None and process_alive(record.get("pid"), record.get("started")):
                pids.add(record["pid"])
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return pids
