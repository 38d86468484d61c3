"""A run's states and the transitions between them, as data: the one state machine every
writer of a status goes through (``RunStore.transition``, a compare-and-set in one SQLite
transaction). Nothing else in the package names a transition; a writer says where it expects the
run to be and where it takes it, and a move that is not in ``TRANSITIONS`` is refused.

::

    queued ──► starting ──► running ──► stopping ──► stopped
      │  ▲         │    ▲      │  │          │
      │  └─────────┘    │      │  └──► succeeded | failed
      │  (a scheduler   └──────┘ (requeued by its scheduler: back to queued;
      │   holds it)               preempted on a box: stopping, then back to queued)
      └──► stopped | failed | lost        any active state ──► lost

A run is born ``queued`` (a launcher registered it and it waits for its place) or ``running``
(a ``fit`` in a kernel or a bare torchrun registers itself as it starts). ``lost`` is final for
the listings, but the one final state its own owner may still correct: a run whose owner was
taken for dead (a host that slept, a store restored from its folders) and then reports its end
takes that end.

A run enters the store by one of two named arrivals, never onto a row of its id: ``born``
(``BORN``) or ``restored`` (``RESTORED``: ``jiyu store repair`` writing it back from its folder,
an owner registering its run again after a store outage), in whatever state its record says.
"""

from __future__ import annotations

from .model import ACTIVE as ACTIVE_STATUSES
from .model import RunStatus

QUEUED, STARTING, RUNNING, STOPPING = RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING
SUCCEEDED, FAILED, STOPPED, LOST = RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.LOST

BORN = frozenset({QUEUED, RUNNING})
ACTIVE = frozenset(ACTIVE_STATUSES)
FINAL = frozenset({SUCCEEDED, FAILED, STOPPED, LOST})
ENDS = frozenset({SUCCEEDED, FAILED, STOPPED})  # how an owner says a run ended (lost is noticed, not said)
# a record is the run's row when it was last written: it comes back as it was, active or final
RESTORED = frozenset(RunStatus)
ARRIVALS: dict[str, frozenset[RunStatus]] = {"born": BORN, "restored": RESTORED}

TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    # waiting for its place; a stop or an owner that fails ends it before anything starts
    QUEUED: frozenset({STARTING, RUNNING, STOPPED, FAILED, LOST}),
    # its placement is starting the ranks; a scheduler may hold it pending (queued again)
    STARTING: frozenset({RUNNING, QUEUED, STOPPING, SUCCEEDED, FAILED, STOPPED, LOST}),
    # a scheduler's requeue (a time limit) takes it back to queued
    RUNNING: frozenset({STOPPING, QUEUED, SUCCEEDED, FAILED, STOPPED, LOST}),
    # a stop under way: the ranks checkpoint and exit (a stop that crossed the last step succeeded);
    # a preempted job's ranks checkpointed and it waits again (``RunLifecycle.requeue``)
    STOPPING: frozenset({STOPPED, SUCCEEDED, FAILED, LOST, QUEUED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    STOPPED: frozenset(),
    LOST: ENDS,  # its owner's late word about how it ended
}


class TransitionRefused(RuntimeError):
    """A writer asked for a move the run is not in a state to make: another writer got there
    first (its final status stands), or the move is not one of ``TRANSITIONS``. ``current`` is
    None for a run the store does not have (an arrival in a state it cannot arrive in)."""

    def __init__(self, run_id: str, current: RunStatus | None, target: RunStatus, reason: str):
        self.run_id, self.current, self.target, self.reason = run_id, current, target, reason
        where = "not in the store" if current is None else f"is {current}"
        super().__init__(f"run {run_id} {where}: it cannot become {target} ({reason})")


def allowed(current: RunStatus, target: RunStatus) -> bool:
    return target in TRANSITIONS[current]


def check(
    run_id: str, current: RunStatus, expected: frozenset[RunStatus] | set[RunStatus], target: RunStatus, reason: str
) -> None:
    """Raises ``TransitionRefused`` unless the run is in one of the ``expected`` states and
    the move from there to ``target`` is allowed. Staying in a state is no move: refused too,
    so a writer learns it was not the one that moved the run."""
    if current not in expected or not allowed(current, target):
        raise TransitionRefused(run_id, current, target, reason)


def check_arrival(run_id: str, present: RunStatus | None, how: str, target: RunStatus, reason: str) -> None:
    """Raises ``TransitionRefused`` unless the store has no row of this id and ``target`` is a
    state the run may arrive in ``how`` (``ARRIVALS``). A row already there is newer than any
    record of it (the store is the authority), so a restore never overwrites one."""
    if present is not None or target not in ARRIVALS[how]:
        raise TransitionRefused(run_id, present, target, f"{how}: {reason}")


def ended_as(said: RunStatus, stop_requested: bool) -> RunStatus:
    """The stop rule, for every owner: a run someone asked to stop that did not succeed ended
    ``stopped`` (the failure its stop signal caused is the stop's doing, not an error)."""
    return STOPPED if stop_requested and said is not SUCCEEDED else said
