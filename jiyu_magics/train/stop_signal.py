"""Stopping a run cleanly: at an optimizer-step boundary, with a checkpoint.

Requests come from the dashboard's Stop button, a kernel interrupt (SIGINT) and, in jobs and
torchrun ranks, SIGTERM from the supervisor. The first signal only sets a flag the loop reads
between steps, so no step, checkpoint or collective is cut in half; a second interrupt raises at
once for a loop that is stuck (a hung data loader). SIGTERM only ever sets the flag: its sender
follows up with SIGKILL after a grace period. In a launched process SIGTERM also stops the
job (``core.job_stop``): once this ``fit`` has returned ``stopped``, the job's script ends
before its next cell and no later ``fit`` starts.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from ..core import job_stop

INTERRUPT = "a kernel interrupt"
TERMINATE = "a stop request (SIGTERM)"
BUTTON = "the Stop button"


class StopSignal:
    """A flag the training loop polls; a plain attribute read costs nothing per step."""

    def __init__(self):
        self.requested = False
        self.reason: str | None = None

    def request(self, reason: str = BUTTON) -> None:
        if not self.requested:
            self.reason = reason
            self.requested = True

    def clear(self) -> None:
        self.requested, self.reason = False, None


def stop_signals() -> list[signal.Signals]:
    """SIGINT always; SIGTERM too when a launcher started us (torchrun rank or jiyu job), so a
    stop leaves a checkpoint. In a kernel SIGTERM keeps its meaning (shut down)."""
    launched = any(os.environ.get(v) for v in ("RANK", "JIYU_RUN_ID"))
    return [signal.SIGINT, signal.SIGTERM] if launched else [signal.SIGINT]


@contextmanager
def signals_request_stop(stop: StopSignal) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in stop_signals()}

    def handler(signum, frame):
        if signum == signal.SIGINT:
            if stop.requested and stop.reason == INTERRUPT:
                raise KeyboardInterrupt
            stop.request(INTERRUPT)
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
