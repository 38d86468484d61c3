"""Where a run's progress goes: its event log (rank 0 writes it), the monitor watching it (the
dashboard or text progress, polled by wall clock), and the history ``fit`` returns.

Every rank builds the same events (their numbers are already reduced across ranks), so every
rank's result has the full history; only rank 0 writes them and talks to a monitor.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.events.fold import RunState, add_to_history
from ..core.events.log import EventLog, read_events
from ..core.runs.model import RunStatus
from .monitor import NullMonitor
from .process_group import DistContext, record_rank_error
from .run_binding import RunBinding
from .step_meter import Window


class Reporter:
    def __init__(self, run: RunBinding, dist: DistContext, monitor=None, started: float | None = None):
        self.run, self.dist = run, dist
        self.monitor = monitor if monitor is not None and dist.is_writer else NullMonitor()
        self.history: list[dict] = []
        self.started = started if started is not None else time.perf_counter()
        self.next_poll = self.started
        self.rate_origin: tuple[float, int] | None = None
        self.samples = 0.0  # every rank's samples in the logged windows,
        self.loop_s = 0.0  # over their wall time: the call's throughput (``throughput``)

    def emit(self, kind: str, **fields: Any) -> dict:
        log = self.run.events
        event = None
        if log is not None:
            try:
                event = log.append(kind, **fields)
            except OSError as error:  # a full disk: the history and the monitor go on without the log
                self.run.drop_log(error)
        if event is None:
            event = {"t": round(time.time(), 3), "kind": kind, **fields}
        add_to_history(self.history, event)
        self.monitor.feed([event])
        return event

    def poll(self) -> None:
        self.monitor.poll()
        self.next_poll = time.perf_counter() + self.monitor.interval

    def poll_if_due(self) -> None:
        if time.perf_counter() >= self.next_poll:
            self.poll()

    def validating(self, step: int, every_s: float):
        """What a validation pass calls after each batch: the monitor's poll when due, and a
        ``val_progress`` event about every ``every_s`` (the log clock), so the run's stall watch
        sees a long validation move. A clock read per batch; no device sync."""
        batches, next_beat = 0, time.perf_counter() + every_s

        def after_batch() -> None:
            nonlocal batches, next_beat
            batches += 1
            self.poll_if_due()
            now = time.perf_counter()
            if now >= next_beat and self.dist.is_writer:
                next_beat = now + every_s
                self.emit("val_progress", step=step, batch=batches)

        return after_batch

    def step(self, step: int, epoch: int, total: int | None, window: Window, lr: float | None) -> dict:
        self.samples += window.samples
        self.loop_s += window.elapsed
        return self.emit(
            "step",
            step=step,
            epoch=epoch,
            loss=window.loss,
            lr=lr,
            samples_per_s=_round(window.samples_per_s, 1),
            mem_alloc=window.mem_alloc,
            mem_reserved=window.mem_reserved,
            mem_peak=window.mem_peak,
            data_wait=_round(window.data_wait, 4),
            grad_norm=window.grad_norm,
            elapsed=round(self.elapsed, 3),
            eta=self._eta(step, total),
        )

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def throughput(self) -> float | None:
        """The call's samples over its training loop's wall time (the logged windows tile it),
        what its end reports: a step event's rate is its last window's, and a last window of
        one short batch (5 samples after 28 of 64) made a run at 780 samples/s end at 52."""
        return _round(self.samples / self.loop_s, 1) if self.loop_s > 0 else None

    def _eta(self, step: int, total: int | None) -> float | None:
        """Remaining time from the pace since the first log (which held the warm-up)."""
        now = time.perf_counter()
        if self.rate_origin is None:
            self.rate_origin = (now, step)
            return None
        since, origin = self.rate_origin
        if total is None or step <= origin:
            return None
        return round((total - step) * (now - since) / (step - origin), 1)

    def end(self, status: RunStatus, step: int, message: str) -> None:
        """The ``end`` event, the final refresh and the run's final status. No plot: whoever
        shows the summary draws it from the events, after ``fit`` has returned."""
        self.emit(
            "end",
            status=status,
            step=step,
            message=message,
            elapsed=round(self.elapsed, 3),
            samples_per_s=self.throughput,
        )
        if self.dist.is_writer:
            self.poll()
        self.run.finish(status, error=message if status is RunStatus.FAILED else None)

    def error(self, error: BaseException, step: int) -> None:
        """Records an error the engine cannot explain better, before it propagates: in the
        event log (by whichever rank failed: the one exception to "rank 0 writes"), in
        torchrun's error file for this rank, and as the run's final status."""
        message = f"{type(error).__name__}: {error}".strip()
        record_rank_error(error, self.run.context.error_file)
        try:
            if self.run.events is not None:
                self.emit("error", message=message, step=step, rank=self.dist.rank)
                first = self._first_error() or message
                self.emit(
                    "end",
                    status=RunStatus.FAILED,
                    step=step,
                    message=first,
                    elapsed=round(self.elapsed, 3),
                    samples_per_s=self.throughput,
                )
                self.run.finish(RunStatus.FAILED, error=first)
            elif self.run.files.root.is_dir():
                with EventLog(self.run.files.events) as log:
                    log.append("error", message=message, step=step, rank=self.dist.rank)
        except Exception:
            pass  # the original error matters more than a failure to record it

    def _first_error(self) -> str | None:
        """The earliest error any rank logged in this call: when rank 1 raises, rank 0 fails
        next with "connection closed by peer", and the user should read rank 1's message."""
        if not self.dist.distributed:
            return None
        return RunState.of(read_events(self.run.files.events)[0]).first_error


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
