"""Finding, listing and stopping jobs, for every front-end (magics, CLI, server)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..core.processes import run_processes
from ..core.processes.info import process_alive
from ..core.runs.model import RunKind, RunStatus
from ..core.store.run_row import Run, UnknownRun
from ..core.store.run_store import RunStore
from . import scheduled_runs
from .job_error import JobError
from .process import process_tree as processes

SUPERVISOR_REPORT_S = 5.0


def resolve(run_id: str, store: RunStore | None = None) -> Run:
    """A run by id or unique id prefix, as readers show it, as a ``JobError`` when there is none."""
    store = store or RunStore()
    try:
        return with_leftovers([store.resolve(str(run_id))], store.host)[0]
    except UnknownRun as error:
        raise JobError(str(error)) from None


DEFAULT_PAGE = 100  # finished runs a listing shows unless asked for more: it stays as quick at 5000 runs as at 50


@dataclass
class RunPage:
    """The runs a listing shows and how many matched: ``total > len(runs)`` when it paged."""

    runs: list[Run]
    total: int


def list_page(include_finished: bool = False, limit: int | None = None, since: float | None = None) -> RunPage:
    """``list_runs``, with finished runs paged: the ``DEFAULT_PAGE`` newest unless ``limit``
    says otherwise, and how many there are in all."""
    if include_finished and limit is None:
        limit = DEFAULT_PAGE
    runs = list_runs(include_finished, limit, since)
    total = RunStore().count(include_finished, since) if limit is not None and len(runs) >= limit else len(runs)
    return RunPage(runs, total)


def list_runs(include_finished: bool = False, limit: int | None = None, since: float | None = None) -> list[Run]:
    """Runs newest first (active ones only unless ``include_finished``; the ``limit`` newest,
    created at or after ``since``), as readers show them: a run whose processes vanished is
    ``lost``. Writes nothing."""
    store = RunStore()
    return with_leftovers(store.list(include_finished=include_finished, limit=limit, since=since), store.host)


def with_leftovers(runs: list[Run], host: str) -> list[Run]:
    """The runs, each ended local run of this host with the processes still carrying its id
    (``Run.leftovers``: a helper its notebook started outlived its ranks). One pass over the
    process table, only when an ended run is listed."""
    ended = [run for run in runs if not run.active and run.backend == "local" and run.host == host]
    if not ended:
        return runs
    carrying = run_processes.carried()
    for run in ended:
        run.leftovers = [_described(proc) for proc in carrying.get(run.id, [])]
    return runs


def _described(proc) -> str:
    """``1234 sleep``: a process's pid and name."""
    try:
        return f"{proc.pid} {proc.name()}"
    except Exception:  # psutil.Error: it ended while listed
        return str(proc.pid)


def queued_runs() -> list[Run]:
    """The runs waiting on this host, in the order they will start (a run whose owner vanished
    shows lost and holds no place)."""
    store = RunStore()
    waiting = [r for r in store.list(include_finished=False) if r.queue_position is not None]
    order = {w.run_id: i for i, w in enumerate(store.leases.queue())}
    return sorted(waiting, key=lambda r: order.get(r.id, len(order)))


def others_waiting() -> list[dict]:
    """Other users' runs in a box's queue, as every member sees them (user, kind, GPUs, place,
    since when); none without a box."""
    return RunStore().leases.others_waiting()


@dataclass
class TopMove:
    run: Run  # with its new place
    note: str | None = None  # the box's rule that kept it behind other users' runs


def move_to_top(run_id: str) -> TopMove:
    """Moves a queued run ahead of every waiting run (``jiyu queue --top``); on a box, ahead of
    other users' runs only for a user the policy lets jump the queue, else ahead of their own."""
    store = RunStore()
    run = resolve(run_id, store)
    if run.status != RunStatus.QUEUED:
        raise JobError(f"run {run.id} is {run.status}, not queued")
    try:
        store.leases.to_top(run.id)
    except ValueError as error:
        raise JobError(str(error)) from None
    return TopMove(store.get(run.id), store.leases.top_note)


@dataclass
class StopReport:
    run: Run  # as it ended
    leftovers: list[int] = field(default_factory=list)  # processes of an ended run this stop ended

    def describe(self) -> str:
        """One line for ``jiyu stop`` and ``%job stop``."""
        line = f"Run {self.run.id} ({self.run.name}): {self.run.status}."
        if self.leftovers:
            count = len(self.leftovers)
            line += (
                f" It had already ended, but {count} process{'es' if count > 1 else ''} still carrying its id "
                f"{'were' if count > 1 else 'was'} running: stopped ({', '.join(map(str, self.leftovers))})."
            )
        return line


def stop(run_id: str, grace: float = 10.0) -> Run:
    """Stops a run and every process of it (``stop_report``); the run as it ended."""
    return stop_report(run_id, grace).run


def stop_report(run_id: str, grace: float = 10.0) -> StopReport:
    """Stops a run and every process of it by the procedure its owner uses (``stop_run``:
    SIGTERM to the ranks, SIGKILL after ``grace`` seconds, then a check of the process table).
    The run's recorded process is spared (its supervisor; torchrun for ``%%train --nproc``,
    whose kernel owns the run), and a kernel that owns it is never signalled: the stop request
    in the row tells the owner, which records the end. A run a scheduler holds is cancelled
    there (``scancel`` / ``kubectl delete``, SIGTERM first) and checked to have left it. A run
    that already ended keeps its status, but any process here still carrying its id (a rank
    whose agent was killed) is stopped all the same, and the report names them."""
    if not 0 <= grace < math.inf:  # inf: a stuck rank would be waited for forever, never killed
        raise JobError(f"--grace {grace!r}: expected a number of seconds >= 0")
    store = RunStore()
    store.record_lost(every=0)  # a stop writes: a run whose processes are gone is recorded lost first
    run = resolve(run_id, store)
    if not run.active:
        return StopReport(run, processes.stop_run(run.id, None, grace).pids)
    return StopReport(_stop_active(store, run, grace))


def _stop_active(store: RunStore, run: Run, grace: float) -> Run:
    if run.kind == RunKind.KERNEL:
        raise JobError(
            f"run {run.id} trains inside a notebook kernel: interrupt that kernel (or press the "
            "dashboard's Stop button) to stop it"
        )
    if scheduled_runs.scheduled(run):
        return scheduled_runs.stop(run, store, grace)
    if run.host != store.host:
        raise JobError(f"run {run.id} runs on {run.host}; stop it there (jiyu stop on that host)")
    store.request_stop(run.id, grace)
    supervisor = run.pid if process_alive(run.pid, run.pid_started) else None
    kernel = _owning_kernel(run)
    if run.status == RunStatus.QUEUED:  # nothing started: its owner leaves the queue and records the stop
        return _await_final(store, run.id, supervisor, kernel, stop_owner=run.kind == RunKind.JOB)
    result = processes.stop_run(run.id, supervisor, grace, spare=[pid for pid in (supervisor, kernel) if pid])
    final = _await_final(store, run.id, supervisor, kernel)
    if result.remaining:
        raise JobError(f"run {run.id}: processes {result.remaining} survived SIGKILL")
    return final


def _owning_kernel(run: Run) -> int | None:
    """The run's living owner where it is not a job's supervisor: the kernel of a ``%%train
    --nproc`` run, whose recorded pid is torchrun's. A stop waits for it to record the end and
    never signals it. An owner that is also the recorded process is none of that: a job's
    supervisor, rank 0 of the user's own torchrun (it trains; a stop must reach it), or a queued
    ``%%train --nproc`` (its kernel, never stopped as the owner of a queued run: ``stop_owner``)."""
    if run.kind == RunKind.JOB or run.owner_pid == run.pid or not process_alive(run.owner_pid, run.owner_started):
        return None
    return run.owner_pid


def _await_final(
    store: RunStore, run_id: str, supervisor: int | None, kernel: int | None = None, stop_owner: bool = True
) -> Run:
    """The owner records the outcome when torchrun exits, so it is given a few seconds even
    once the recorded process is gone (for ``%%train --nproc`` that is torchrun, and the
    kernel records after it: waited for while it lives). An owner that does not report is
    stopped (never a kernel: a queued ``%%train --nproc`` is known by its kernel's pid, and
    ``kernel`` is spared whatever it is recorded as), and the end is recorded here by the same
    rule (no exit code seen, a stop requested: stopped)."""
    deadline = time.monotonic() + SUPERVISOR_REPORT_S
    while (supervisor is not None or kernel is not None) and time.monotonic() < deadline:
        run = store.get(run_id)
        if not run.active:
            return run
        time.sleep(0.1)
    if supervisor is not None and stop_owner:
        processes.stop(processes.tree(supervisor), grace=1.0, spare=[kernel] if kernel else [])
    from .lifecycle import record_end_without_owner  # a stop's end, not a listing's start-up

    return record_end_without_owner(store, run_id)
