"""Stopping a run cleanly: at an optimizer-step boundary, with a checkpoint.

Requests come from the dashboard's Stop button, a kernel interrupt (SIGINT) and, in jobs and
torchrun ranks, SIGTERM from the supervisor and SIGUSR1 from a scheduler whose time limit is
near (Slurm's ``--signal``, passed on by the batch script and torchrun). The first signal only
sets a flag the loop reads between steps, so no step, checkpoint or collective is cut in half; a
second interrupt raises at once for a loop that is stuck (a hung data loader). SIGTERM and
SIGUSR1 only ever set the flag: their senders follow up with SIGKILL (or the time limit).

A stop for the time limit ends the process once the checkpoint is written (``leave_for_requeue``):
the scheduler requeues the job, and its next attempt resumes from that checkpoint. In a launched
process SIGTERM also stops the job (``core.job_stop``): once this ``fit`` has returned
``stopped``, the job's script ends before its next cell and no later ``fit`` starts.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..core.processes import job_stop

INTERRUPT = "a kernel interrupt"
TERMINATE = "a stop request (SIGTERM)"
TIME_LIMIT = "the scheduler's time limit (SIGUSR1): requeued, resuming from this checkpoint"
BUTTON = "the Stop button"


ESCALATE_MIN_S = 0.5  # a pool rank that has not reached a step this long after an interrupt is stuck...
ESCALATE_STEPS = 3.0  # ...or this many of its recent steps' time, when its steps are slower


class StopSignal:
    """A flag the training loop polls; a plain attribute read costs nothing per step."""

    def __init__(self) -> None:
        self.requested = False
        self.reason: str | None = None
        self.reached = False  # the loop came to a step boundary after the request (it acts on it)
        self.pace = 0.0  # seconds a step took lately, as the loop last measured it
        self._paced: tuple[int, float] | None = None

    def passed_step(self, step: int, now: float) -> None:
        """The loop is at a step boundary (called when something is due, not every step)."""
        if self.requested:
            self.reached = True
        if self._paced is not None and step > self._paced[0]:
            self.pace = (now - self._paced[1]) / (step - self._paced[0])
        self._paced = (step, now)

    def escalation_delay(self) -> float:
        return max(ESCALATE_MIN_S, ESCALATE_STEPS * self.pace)

    def request(self, reason: str = BUTTON) -> None:
        """The first reason stands, except that the time limit's overrides a SIGTERM: when the
        scheduler's USR1 reaches torchrun, its agent may pass a SIGTERM on to the ranks before
        or beside the USR1, and the stop is still the time limit's (requeue, resume)."""
        if not self.requested or (reason == TIME_LIMIT and self.reason == TERMINATE):
            self.reason = reason
            self.requested = True

    def clear(self) -> None:
        self.requested, self.reason, self.reached = False, None, False


def stop_signals(launched: bool) -> list[signal.Signals]:
    """SIGINT always; SIGTERM and SIGUSR1 too when a launcher started us (``LaunchContext.
    launched``: a torchrun rank or a jiyu job), so a stop or the time limit leaves a checkpoint.
    In a kernel SIGTERM keeps its meaning (shut down) and SIGUSR1 is nobody's."""
    return [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1] if launched else [signal.SIGINT]


def leave_for_requeue(stop: StopSignal) -> None:
    """After a stop for the time limit, with its checkpoint written: the process ends here
    (the rest of the notebook would run on a half-trained model), and the scheduler's next
    attempt resumes from that checkpoint."""
    if stop.requested and stop.reason == TIME_LIMIT:
        print(f"jiyu: stopped for {TIME_LIMIT}", file=sys.stderr, flush=True)
        raise SystemExit(0)


@contextmanager
def signals_request_stop(stop: StopSignal, launched: bool, escalate: bool = False) -> Iterator[None]:
    """``escalate`` (a pool's rank, whose stop comes as one interrupt): a rank that has not come
    to a step boundary ``stop.escalation_delay()`` after the interrupt is stuck inside a step (a
    hung data loader, a sleep), and gets the second interrupt itself. Its cell then ends
    interrupted, the pool aborts the collective its peers wait in, and no rank is killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in stop_signals(launched)}
    main = threading.main_thread().ident or 0

    def escalate_if_stuck() -> None:
        if stop.requested and stop.reason == INTERRUPT and not stop.reached:
            signal.pthread_kill(main, signal.SIGINT)

    def handler(signum, frame):
        if signum == signal.SIGINT:
            if stop.requested and stop.reason == INTERRUPT:
                raise KeyboardInterrupt
            stop.request(INTERRUPT)
            if escalate:
                timer = threading.Timer(stop.escalation_delay(), escalate_if_stuck)
                timer.daemon = True
                timer.start()
        elif signum == signal.SIGUSR1:
            stop.request(TIME_LIMIT)
        else:
            # SIGTERM never escalates: a stop reaches a rank twice (torchrun forwards it, and a
            # launcher signals every process group), and whoever sends it escalates with SIGKILL
            stop.request(TERMINATE)
            job_stop.note(TERMINATE)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
