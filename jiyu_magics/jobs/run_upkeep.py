"""The explicit step in which run owners bring the stored state up to date with the world, so
that no reader has to: the runs whose processes are gone are recorded ``lost`` (their leases
end, their logs say so), ended runs from before summaries were stored get theirs, and the runs
a scheduler holds have their follower running, and a shared box's book hears of runs that
ended while its keeper could not be told.

Taken by the processes that own runs, never by a listing: the Jupyter server's sampler (every
``usage_sample_interval``, 10 s), the next submit, a job's supervisor as it starts, and a
queued run's owner while it waits (``gpu_queue``). Each store records lost runs at most every
``RECORD_LOST_EVERY_S`` seconds per process.
"""

from __future__ import annotations

from ..core.store.run_store import RunStore
from . import scheduler_follower


def upkeep(store: RunStore | None = None) -> list[str]:
    """Records lost runs, stores the summaries an older store lacks, and starts the scheduler
    follower where scheduled runs are active; the ids it recorded lost."""
    store = store or RunStore()
    lost = store.record_lost()
    store.store_missing_summaries()
    active = store.list(include_finished=False, annotate=False)
    if any(scheduler_follower.followed(run, store.host) for run in active):
        scheduler_follower.ensure_running()
    store.leases.reconcile([run.id for run in active if run.active])  # a box's book told what it missed
    return lost
