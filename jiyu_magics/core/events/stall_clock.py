"""When a run's step last moved, and whether it has stood still for too long: read from its
event log alone, so the owner that watches it adds nothing to the training loop.

The engine logs ``step`` events on a wall clock (about every half second, or every step when
steps are slower), each with its ``t``: the time of the last step logged is the time the step
last moved, to within one log interval. A ``start`` event arms the clock (the step may not
move before it: imports, data, ``torch.compile``) and says the call's ``stall_timeout``; its
``end`` disarms it (whatever the script does after ``fit`` is not a stall). A validation pass
moves too: its ``val_progress`` events (at the log interval, while batches complete) count as
progress, so a validation longer than the timeout is not flagged, but one stuck is.

The timeout: the call's own (``fit(stall_timeout=S)``), else the job's default (``%submit
--stall-timeout S``), else the larger of 10x the median step time and five minutes; ``0`` turns
it off.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable

from ..runs.model import EventKind

DEFAULT_MIN_TIMEOUT_S = 300.0
MEDIAN_FACTOR = 10.0
STEP_TIMES_KEPT = 256  # the median of the recent pace: a run that slowed down on purpose adapts


class StallClock:
    def __init__(self, default_timeout: float | None = None):
        self.default_timeout = default_timeout
        self.armed = False
        self.step: int | None = None
        self.moved: float | None = None  # when the step last moved (or the call started)
        self.call_timeout: float | None = None
        self.step_times: deque[float] = deque(maxlen=STEP_TIMES_KEPT)
        self._last: tuple[float, int] | None = None

    def feed(self, events: Iterable[dict]) -> None:
        for event in events:
            kind = event["kind"]
            if kind == EventKind.START:
                self._start(event)
            elif kind == EventKind.STEP and self.armed and isinstance(event.get("step"), (int, float)):
                self._step(event["t"], int(event["step"]))
            elif kind == EventKind.VAL_PROGRESS and self.armed and isinstance(event.get("t"), (int, float)):
                self.moved = max(self.moved or event["t"], event["t"])  # progress, not a step: no pace
            elif kind == EventKind.END:
                self.armed = False

    def _start(self, event: dict) -> None:
        self.armed, self.moved, self.step = True, event["t"], event.get("start_step")
        self.call_timeout = event.get("stall_timeout")
        self.step_times.clear()
        self._last = None

    def _step(self, t: float, step: int) -> None:
        if self._last is not None and step > self._last[1]:
            self.step_times.append((t - self._last[0]) / (step - self._last[1]))
        if step != self.step:
            self.step, self.moved = step, t
        self._last = (t, step)

    @property
    def median_step_s(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    @property
    def timeout(self) -> float | None:
        """Seconds the step may stand still; None: stall detection is off for this call."""
        chosen = self.call_timeout if self.call_timeout is not None else self.default_timeout
        if chosen is not None:
            return float(chosen) or None
        return max(MEDIAN_FACTOR * (self.median_step_s or 0.0), DEFAULT_MIN_TIMEOUT_S)

    def stalled_since(self, now: float) -> float | None:
        """The time the step stopped moving, when that is at least the timeout ago; else None."""
        timeout = self.timeout
        if not self.armed or self.moved is None or timeout is None:
            return None
        return self.moved if now - self.moved >= timeout else None


class BadStallTimeout(ValueError):
    """A stall timeout that is not seconds >= 0; ``str()`` is what is expected, for each door to
    say in its own words."""


def check_stall_timeout(value: object) -> float | None:
    """The one rule for a stall timeout, whichever door it comes through (``fit``,
    ``%%train``, ``%submit``, ``jiyu submit``, the REST API): None for the default rule, else a
    finite number of seconds >= 0 (0 turns stall detection off). NaN, infinity, booleans and
    text are refused: NaN passed ``>= 0`` once and silently turned detection off."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise BadStallTimeout("seconds >= 0 (0: off)")
    return float(value)
