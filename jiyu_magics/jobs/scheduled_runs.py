"""Runs a scheduler holds (Slurm, Kubernetes): their lifecycle owner made again from the row
(``owner_of``), which the host's follower (``scheduler_follower``) lets look at the scheduler
every few seconds, and which ``jiyu stop`` uses to cancel one and record its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.runs.files import RunFiles
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from .backends import SCHEDULED_BACKENDS, placement_for
from .job_error import JobError

if TYPE_CHECKING:  # imported where a scheduled run is followed: a listing of local runs (``jiyu
    # jobs``, 45 ms of its start-up) never needs the lifecycle chain
    from .final_status import Outcome
    from .lifecycle import RunLifecycle
    from .stall_watch import StallWatch

# The follower's stall watch per run: it reads only what the event log gained since its last
# look (the follower lives as long as the host has scheduled runs, and never rereads a long log)
_stall_watches: dict[str, StallWatch] = {}
END_WAIT_S = 60.0  # after a stop, how long the scheduler may take to report the job's end
END_CHECK_S = 1.0


def scheduled(run: Run) -> bool:
    return run.backend in SCHEDULED_BACKENDS


def owner_of(run: Run, store: RunStore) -> RunLifecycle:
    """The run's lifecycle owner, made again from its row, with its scheduler's placement (and
    its saved launch spec; the row's numbers where the folder lost it, as after a store repair)."""
    from .launch_spec import LaunchSpec
    from .lifecycle import RunLifecycle

    try:
        spec = LaunchSpec.load(RunFiles.of(run.id))
    except (OSError, ValueError, TypeError):
        spec = LaunchSpec(nproc=run.nproc, nnodes=run.nnodes, backend=run.backend)
    owner = RunLifecycle(
        run.id,
        spec,
        placement=placement_for(run.backend),
        store=store,
        owner=f"{run.backend} follower",
        announce=log_end(run),
    )
    owner.stall_watch = _stall_watch(run, store, spec.stall_timeout)
    return owner


def _stall_watch(run: Run, store: RunStore, timeout: float | None) -> StallWatch | None:
    """The run's stall watch in this process, while it is active: a stalled scheduled run is
    flagged and its ranks' stacks dumped (over the shared folder) by the host's follower."""
    if not run.active:
        _stall_watches.pop(run.id, None)
        return None
    if run.id not in _stall_watches:
        from .stall_watch import StallWatch

        _stall_watches[run.id] = StallWatch(run.id, store, timeout)
    watch = _stall_watches[run.id]
    watch.store = store
    return watch


def stop(run: Run, store: RunStore, grace: float) -> Run:
    """Stops a scheduled run through its owner (SIGTERM first so the ranks checkpoint, then the
    scheduler's cancel), checks that the job left the scheduler, and records its end."""
    from .rank_placement import SchedulerUnreachable

    owner = owner_of(run, store)
    try:
        result = owner.stop(grace)
        _await_end(owner)
    except SchedulerUnreachable as why:
        raise JobError(f"run {run.id}: cannot stop its {run.backend} job now: {why}") from None
    if result is not None and result.remaining:
        raise JobError(f"run {run.id}: its {run.backend} job {run.scheduler_id} is still there after the stop")
    return store.get(run.id)


def _await_end(owner: RunLifecycle) -> None:
    deadline = time.monotonic() + END_WAIT_S
    while owner.follow().active and time.monotonic() < deadline:
        time.sleep(END_CHECK_S)


def log_end(run: Run) -> Callable[[Outcome], None]:
    """The run's last log line, as a local job's supervisor writes it, so ``jiyu logs`` shows
    how the run ended (the scheduler's job has exited: nothing else writes the log then)."""

    def announce(outcome: Outcome) -> None:
        code = outcome.exit_code
        line = (
            f"[jiyu] {time.strftime('%H:%M:%S')} {run.backend} job {outcome.status}"
            + (f" (exit code {code})" if code else "")
            + (f": {outcome.error}" if outcome.error else "")
        )
        try:
            with open(RunFiles.of(run.id).log, "a") as log:
                log.write(line + "\n")
        except OSError:
            pass

    return announce
