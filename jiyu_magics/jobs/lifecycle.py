"""One owner of a run's lifecycle, whatever launched it.

``%%train --nproc`` runs it in the kernel's thread, ``%submit``'s detached supervisor in its own
process; both go through the same steps, so a run ends the same way whoever started it::

    lifecycle = RunLifecycle.register(RunKind.DDP, "mnist", LaunchSpec(nproc=2))
    with lifecycle:                  # an error in the owner ends the run failed, nothing left running
        ...write lifecycle.files.script...
        lifecycle.start(env={...})
        lifecycle.wait()             # or poll lifecycle.running() while showing a dashboard
        outcome = lifecycle.end()

The run goes through the states of the one state machine (``core.runs.states``), each move
written through the store's guarded writer: queued → starting → running → (stopping) → an end.
A run waits in ``queued`` until its placement grants it a place (locally: GPU leases from the
run store's queue, ``gpu_queue``, which turn it ``starting`` in the lease's transaction); a
stop request while it waits ends it ``stopped`` and nothing starts. Where the ranks run is the
placement's business (``rank_placement``); stopping is the one procedure of
``process_tree.stop_run``; the final status is the one rule of ``final_status``. The owner
records the end (event log, then run row, in one transaction; its leases end there too). The
row names the owner (``owner_pid``: the kernel, the supervisor) apart from the process it
records (``pid``: the supervisor, or torchrun once a kernel's ranks start, which ``jiyu stop``
spares and waits for): a kernel is never signalled, and a run shows lost only once both are
gone.

A scheduler's placement (Slurm, Kubernetes) grants at once and submits in ``start``; the
scheduler then holds the run, so no owner process waits on it: whoever asks about the run
makes its owner again from the row and calls ``follow``, which records the scheduler's state
and, once the job ended, the end by the same rule::

    RunLifecycle.adopt(run_id, placement=SlurmPlacement()).follow()

A stop ends the run, whatever launched it and wherever its ranks run: it reaches the ranks,
which stop training at a step with a checkpoint, run no further cell and start no further
``fit`` (``core.job_stop``), and exit cleanly; a run asked to stop while queued never starts.
Nothing of a run outlives its end: ranks die with their torchrun agent, torchrun with its
owner, and the owner stops every process carrying the run id before it records any end.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from ..core.events.log import EventLog, read_events
from ..core.processes.info import process_start_time
from ..core.runs.files import RunFiles
from ..core.runs.model import RunStatus
from ..core.runs.states import TransitionRefused
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from ..trackers.follow_process import OWNER_WAIT_S
from ..trackers.owner import RunTracking
from .final_status import Outcome, closing_events, decide
from .gpu_queue import Grant
from .launch_spec import LaunchSpec
from .process import process_tree as processes
from .process import rank_records
from .process.error_line import one_line
from .process.process_tree import StopResult
from .rank_placement import LocalProcessGroup, RankHandle, RankPlacement, ScheduledHandle, SchedulerState
from .stall_watch import StallWatch
from .store_outage import END_WAIT_S, LOST, RETRY_S, StoreOutage

STORE_CHECK_S = 2.0  # how often the run row is read for a stop request that came without a signal
POLL_S = 0.5
DEFAULT_STOP_GRACE_S = 10.0


class RunLifecycle:
    def __init__(
        self,
        run_id: str,
        spec: LaunchSpec,
        *,
        placement: RankPlacement | None = None,
        store: RunStore | None = None,
        owner: str = "launcher",
        recorded_pid: int | None = None,
        announce: Callable[[Outcome], None] | None = None,
        track: Iterable[str] = (),
        note: Callable[[str], None] | None = None,
    ):
        """``recorded_pid`` is the run row's ``pid`` while the ranks run: the process ``jiyu
        stop`` spares and waits for (the supervisor, which owns the run). None for an owner
        that must never be signalled (a kernel): torchrun is recorded instead, and the kernel
        only as the row's owner (``owner_pid``), which keeps the run from being marked lost in
        the moment between torchrun's exit and the kernel recording the end.
        ``announce`` hears the outcome before the run row says it (the supervisor's log line).
        ``track``: trackers the launch named besides its spec's (``%%train --nproc --track``);
        those the run's ``start`` events name are followed too (``trackers.owner``).
        ``note`` hears what the owner does while the store is out (``store_outage``)."""
        self.run_id, self.spec = run_id, spec
        self.store = store or RunStore()
        self.files = RunFiles.of(run_id).create()
        self.placement: RankPlacement = placement or LocalProcessGroup()
        self.owner, self.recorded_pid, self.announce = owner, recorded_pid, announce
        self.handle: RankHandle | None = None
        self.job: ScheduledHandle | None = None  # the handle, where a scheduler holds the ranks
        self.grant: Grant | None = None
        self.stop_requested = False
        self.preempted = False  # another user's run asked for its GPUs (on a box): stop, then requeue
        self.stop_grace = DEFAULT_STOP_GRACE_S
        self.outcome: Outcome | None = None
        self._stopper: threading.Thread | None = None
        self.stop_result: StopResult | None = None
        self._store_checked = -float("inf")
        self.stall_watch: StallWatch | None = None  # made when local ranks run; a follower's is given
        wait_s = OWNER_WAIT_S if owner == "kernel" else 0.0  # a cell: the trackers' last word shows in it
        self.tracking = RunTracking(run_id, [*track, *(spec.track or [])], wait_s=wait_s)
        self.outage = StoreOutage(run_id, self.store, note, leases=lambda: self.grant.leases if self.grant else ())

    @classmethod
    def register(
        cls,
        kind: str,
        name: str,
        spec: LaunchSpec,
        *,
        notebook: str | None = None,
        params: dict | None = None,
        **options,
    ) -> RunLifecycle:
        """A new run row (``queued``, in line for ``spec.gpus``) and its owner, this process:
        while the run waits, the store knows it by this pid (a dead owner frees its place), and
        as its owner (``owner_pid``) until the end, whatever pid the ranks' start records."""
        store: RunStore = options.pop("store", None) or RunStore()
        placement: RankPlacement = options.pop("placement", None) or LocalProcessGroup()
        pid, started = os.getpid(), process_start_time(os.getpid())
        run = store.create(
            kind,
            name,
            nproc=spec.nproc,
            nnodes=spec.nnodes,
            notebook=notebook,
            params=params or {},
            backend=placement.backend,
            pid=pid,
            pid_started=started,
            owner_pid=pid,
            owner_started=started,
            **spec.queue_fields(),
        )
        return cls(run.id, spec, store=store, placement=placement, **options)

    @classmethod
    def adopt(cls, run_id: str, **options) -> RunLifecycle:
        """The owner of a run someone else registered, with the launch spec saved in its folder."""
        return cls(run_id, LaunchSpec.load(RunFiles.of(run_id)), **options)

    @property
    def status(self) -> RunStatus:
        """The run's status as stored (the one state machine's; this owner keeps no copy)."""
        return self.store.stored(self.run_id).status

    # -- start and follow ----------------------------------------------------------------------
    def start(
        self,
        env: Mapping[str, str] | None = None,
        stop_wanted: Callable[[], bool] = lambda: False,
        on_wait: Callable[[str], None] | None = None,
        script: os.PathLike | None = None,
    ) -> bool:
        """Waits in ``queued`` for a place (``on_wait`` hears each new line saying why), then
        starts the ranks on ``script`` (default ``files.script``) with ``env`` added to this
        process's environment.
        False when a stop request (or ``stop_wanted()``) came first: then nothing starts."""
        if not self._wait_for_place(stop_wanted, on_wait):
            return False
        run = self.outage.seen(self.store.stored(self.run_id))
        if run.status is RunStatus.QUEUED:  # no lease to take (a scheduler's place, no GPU wanted)
            granted = "its place was granted"
            run = self.outage.retry_busy(
                lambda: self.store.transition(self.run_id, {RunStatus.QUEUED}, RunStatus.STARTING, granted)
            )
        placement = self.placement
        if placement.scheduled:
            self.handle = self.job = placement.start(
                self.run_id, script or self.files.script, self.spec, cwd=run.cwd, env=env, grant=self.grant
            )
            self.follow()
            return True
        handle = placement.start(
            self.run_id, script or self.files.script, self.spec, cwd=run.cwd, env=env, grant=self.grant
        )
        self.handle = handle
        pid = self.recorded_pid or handle.pid
        try:
            self.outage.seen(self.store.mark_running(self.run_id, pid=pid, pgid=handle.pgid))
        except LOST as problem:  # the ranks run all the same: recorded once the store is back
            self.outage.ranks_started({"pid": pid, "pgid": handle.pgid, "started": time.time()})
            self.outage.lost(problem)
        self.stall_watch = StallWatch(self.run_id, self.store, self.spec.stall_timeout)
        return True

    def follow(self) -> Run:
        """One look at a run a scheduler holds: its state there recorded in the row (queued
        with the scheduler's reason, running) and, once the job ended, its end by the one rule.
        Called by whoever shows the run (``jobs.scheduled_runs``), at most every few seconds."""
        run = self.store.stored(self.run_id)
        if not run.active:
            return run
        job = self._job(run)
        state = job.state()
        run = self._record(run, job, state)
        if state.status is RunStatus.RUNNING and self.stall_watch is not None:
            self.stall_watch.check()  # the scheduler's ranks, watched by whoever follows them
        if state.over:
            self.stop_requested |= state.cancelled  # a scancel / kubectl delete by anyone is a stop
            self.end(lost=state.lost)
            run = self.store.stored(self.run_id)
        return run

    def _job(self, run: Run) -> ScheduledHandle:
        """The job a scheduler holds: the handle ``start`` made, else one attached from ``run``."""
        placement = self.placement
        if not placement.scheduled:
            raise TypeError(f"the ranks of a {placement.backend} run are no scheduler's to follow")
        if self.job is None:
            self.handle = self.job = placement.attach(run)
        return self.job

    def _record(self, run: Run, job: ScheduledHandle, state: SchedulerState) -> Run:
        """The scheduler's word in the row (written only when it changed): its id for the job,
        when the job started, and queued with its reason, or running."""
        changes: dict[str, Any] = {"scheduler_id": job.scheduler_id, "started": run.started or state.started}
        target = None
        if state.status is RunStatus.RUNNING:
            changes.update(queue_reason=None, started=changes["started"] or time.time())
            target = RunStatus.RUNNING
        elif state.status is RunStatus.QUEUED:
            changes.update(queue_reason=state.reason)
            target = RunStatus.QUEUED
        changes = {name: value for name, value in changes.items() if getattr(run, name) != value}
        following = {RunStatus.QUEUED, RunStatus.STARTING, RunStatus.RUNNING}  # a stop under way stays stopping
        if target is not None and target != run.status and run.status in following:
            reason = f"its {run.backend} job is {target} there"
            return self.store.transition(self.run_id, following, target, reason, **changes)
        return self.store.update(self.run_id, **changes) if changes else run

    def _wait_for_place(self, stop_wanted: Callable[[], bool], on_wait: Callable[[str], None] | None) -> bool:
        """While the store is out (deleted, busy), the run keeps its place in its folder and
        waits for the store to come back rather than failing (``store_outage``)."""
        said = None
        while True:
            every, line = RETRY_S, None
            if self.outage.back() and not self.outage.settling:
                try:
                    run = self.outage.seen(self.store.stored(self.run_id))
                    self.stop_requested |= run.stop_requested
                    if self.stop_requested or run.status != RunStatus.QUEUED:
                        return False
                    self.grant = self.placement.reserve(self.run_id)
                    if self.grant is not None:
                        return True
                    every, line = self.placement.wait_hint(self.run_id)
                except LOST as problem:
                    self.outage.lost(problem)
            self.stop_requested |= stop_wanted()
            if self.stop_requested:
                return False
            if on_wait is not None and line is not None and line != said:
                on_wait(line)
                said = line
            time.sleep(every)

    def running(self) -> bool:
        """Whether the ranks still run. Also acts on a stop request in the run row (``jiyu
        stop`` from another host, the panel), read at most every ``STORE_CHECK_S``, and
        watches for a stall (``stall_watch``)."""
        if self.handle is None or self.handle.poll() is not None:
            return False
        if not self.outage.back():
            return True  # the store is out: the ranks go on, the store is tried again (``store_outage``)
        try:
            self._honour_stored_stop()
            if self.stall_watch is not None and self._stopper is None:
                self.stall_watch.check()  # flags a stall, with every rank's stack; at most every few seconds
            self.tracking.check()  # starts the trackers' follower once the run names one; at most every second
        except LOST as problem:
            self.outage.lost(problem)
        return True

    def wait(
        self,
        stop_wanted: Callable[[], bool] = lambda: False,
        every: float = POLL_S,
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Until the ranks exit; ``stop_wanted()`` true (a signal to the owner) stops them.
        ``tick`` runs once per poll (the supervisor's GPU usage sampling)."""
        while self.running():
            if stop_wanted():
                self.request_stop()
            if tick is not None:
                tick()
            time.sleep(every)

    def ranks(self) -> list[rank_records.RankRecord]:
        """Each rank's latest record (pid, restart, state, exit code), as the ranks wrote it."""
        return rank_records.read_all(self.run_id)

    # -- stop ----------------------------------------------------------------------------------
    def request_stop(self, grace: float | None = None) -> None:
        """The owner's stop (Stop button, interrupt, a signal to the supervisor): recorded in
        the run row, then SIGTERM, SIGKILL after the grace, on a thread, so the caller keeps
        showing the ranks checkpoint and exit. A second request changes nothing: see ``kill``."""
        try:
            if not self.store.stored(self.run_id).stop_requested:
                self.store.request_stop(self.run_id, grace if grace is not None else self.stop_grace)
        except LOST as problem:  # the stop needs no store: the ranks hear it all the same
            self.outage.lost(problem)
        self._send_stop(grace)

    def kill(self) -> None:
        """No more waiting (a second interrupt, or the owner failing): SIGKILL what is left."""
        if self.handle is None:
            return
        self.handle.stop(grace=0)

    def _honour_stored_stop(self) -> None:
        if self._stopper is not None or time.monotonic() - self._store_checked < STORE_CHECK_S:
            return
        self._store_checked = time.monotonic()
        run = self.outage.seen(self.store.stored(self.run_id))
        if run.stop_requested:
            self._send_stop(run.stop_grace)
        elif run.preemptible and self.store.leases.preempt_wanted(self.run_id):
            self._preempt(run)

    def _finished_anyway(self) -> bool:
        """The ranks had ended their work before the preemption reached them: nothing to resume."""
        handle = self.handle
        return handle is not None and handle.poll() == 0 and not any(r.stopped for r in handle.ranks())

    def _preempt(self, run: Run) -> None:
        """Another user's run waited past the box's limit for these GPUs: the ranks stop with
        a checkpoint (``stopping``, no stop request: a person's stop still ends the run), and
        the owner then puts the run back in the queue (``requeue``)."""
        try:
            self.store.transition(
                self.run_id,
                {RunStatus.STARTING, RunStatus.RUNNING},
                RunStatus.STOPPING,
                "preempted on the box: another user's run waited past preempt_after_minutes",
            )
        except TransitionRefused:
            return
        self.preempted = True
        self._send_stop(run.stop_grace)
        self.stop_requested = False  # the stop is the preemption's; the run goes on after it

    def requeue(self) -> bool:
        """After a preemption's stop: the run back in the queue at its old place, its leases
        ended, ready for ``start`` again (its ranks then resume from their checkpoints). False
        when a person asked to stop it meanwhile: it ends instead."""
        if not self.preempted:
            return False
        self._leave_nothing_running()
        run = self.store.stored(self.run_id)
        if run.stop_requested or run.status is not RunStatus.STOPPING or self._finished_anyway():
            return False
        self.store.transition(
            self.run_id,
            {RunStatus.STOPPING},
            RunStatus.QUEUED,
            "preempted: its checkpoint is saved; it waits for GPUs again",
            queue_reason="preempted: resumes from its checkpoint when GPUs free",
        )
        self.store.leases.requeue(self.run_id)
        self.handle = self.job = None
        self.grant, self._stopper, self.stop_result, self.stall_watch = None, None, None, None
        self.stop_requested = self.preempted = False
        return True

    def _send_stop(self, grace: float | None) -> None:
        self.stop_requested = True
        if grace is not None:
            self.stop_grace = grace
        if self.handle is None and self.placement.scheduled:
            self._job(self.store.stored(self.run_id))
        if self._stopper is not None or self.handle is None or self.handle.poll() is not None:
            return
        self._stopper = threading.Thread(
            target=self._stop_handle, args=(self.handle, self.stop_grace), name=f"jiyu-stop-{self.run_id}", daemon=True
        )
        self._stopper.start()

    def _stop_handle(self, handle: RankHandle, grace: float) -> None:
        self.stop_result = handle.stop(grace)

    def stop(self, grace: float | None = None) -> StopResult | None:
        """``request_stop``, waited for: for a caller that answers only once the stop is done
        (``jiyu stop`` of a run a scheduler holds). None when there was nothing to stop."""
        self.request_stop(grace)
        if self._stopper is not None:
            self._stopper.join()
        return self.stop_result

    # -- end -----------------------------------------------------------------------------------
    def end(self, error: str | None = None, lost: bool = False) -> Outcome:
        """Leaves nothing of the run running, decides the final status by the one rule and
        records it. ``error`` is the owner's own failure, told instead of the ranks' line;
        ``lost``: the scheduler forgot the job before anyone saw it end. Ending twice returns
        the first outcome."""
        if self.outcome is not None:
            return self.outcome
        self._leave_nothing_running()
        code = self.handle.wait() if self.handle is not None else None
        try:
            run: Run | None = self.outage.known
            if self.outage.back():
                run = self.outage.seen(self.store.stored(self.run_id))
        except LOST as problem:
            self.outage.lost(problem)
            run = self.outage.known
        self.stop_requested |= run is not None and run.stop_requested
        events, _ = read_events(self.files.events)
        line = error or (self.handle.error_line() if self.handle is not None else None)
        started = self.handle is not None and (
            not self.placement.scheduled or (run is not None and run.started is not None)
        )
        ranks_stopped = self.handle is not None and any(r.stopped for r in self.handle.ranks())
        self.outcome = (
            Outcome(RunStatus.LOST, None, line)
            if lost
            else decide(
                code,
                self.stop_requested,
                events,
                line,
                started=started,
                ranks_stopped=ranks_stopped,
                name=run.name if run is not None else None,
            )
        )
        if self.announce is not None:
            self.announce(self.outcome)
        self._record_end(self.outcome)
        self.tracking.finish(scheduled=self.placement.scheduled)
        return self.outcome

    def _record_end(self, outcome: Outcome) -> None:
        """``record_end``; while the store is out, the end is kept in the run folder and
        recorded in the store once it is back, waited for up to ``END_WAIT_S``."""
        try:
            record_end(self.store, self.run_id, outcome)
            return
        except LOST as problem:
            self.outage.lost(problem)
        self.outage.keep_end(outcome)
        deadline = time.monotonic() + END_WAIT_S
        while time.monotonic() < deadline:
            if self.outage.back(force=True):
                try:
                    record_end(self.store, self.run_id, outcome)
                    return
                except LOST as problem:
                    self.outage.lost(problem)
            time.sleep(RETRY_S)
        self.outage.note("the store did not come back: the run's end is in its folder; `jiyu store repair` records it")

    def _leave_nothing_running(self) -> None:
        """The stop under way finishes first; then whatever is still alive (torchrun, or a
        worker that left its tree) is stopped: with the grace when nobody stopped it yet."""
        if self._stopper is not None:
            self._stopper.join()
        if self.handle is None:
            return
        if self.handle.poll() is None or processes.leftovers(self.run_id):
            self.handle.stop(0 if self.stop_requested else self.stop_grace)

    def __enter__(self) -> RunLifecycle:
        return self

    def __exit__(self, kind, error, traceback) -> Literal[False]:
        """An error in the owner (or an interrupt outside its follow loop) must not leave
        ranks running nor the run ``running``: kill, then end with the owner's error."""
        if error is None or self.outcome is not None:
            return False
        if isinstance(error, KeyboardInterrupt):
            self.stop_requested = True
            self.store.request_stop(self.run_id, 0)
        self.kill()
        self.end(error=f"{self.owner} error: {one_line(error)}")
        return False


def record_end(store: RunStore, run_id: str, outcome: Outcome) -> Run:
    """The end of a run, recorded in one place, in one store transaction: the closing events
    are appended to the log, then the run row says the end, so whoever sees the final status
    also finds the whole log. When another writer recorded an end first, its status stands
    and nothing is written (the log and the row keep agreeing)."""
    files = RunFiles.of(run_id)

    def close_log() -> None:
        added = closing_events(read_events(files.events)[0], outcome)
        if added:
            with EventLog(files.events) as log:
                for kind, fields in added:
                    log.append(kind, **fields)

    try:
        return store.finish(run_id, outcome.status, outcome.exit_code, outcome.error, then=close_log)
    except TransitionRefused:
        return store.stored(run_id)


def record_end_without_owner(store: RunStore, run_id: str, error: str | None = None) -> Run:
    """The end of a run whose owner never came to be or is gone (submit could not hand it
    over, ``jiyu stop`` found no owner to report), by the same rule with no exit code seen:
    stopped when a stop was requested, else failed with ``error``."""
    run = store.stored(run_id)
    events = read_events(RunFiles.of(run_id).events)[0]
    started = run.started is not None
    return record_end(store, run_id, decide(None, run.stop_requested, events, error, started=started, name=run.name))
