"""At which optimizer steps something falls due: the next log (every ``log_every`` steps, or
about every ``log_interval_s`` by the log clock), validation every ``val_every``, a checkpoint
every ``ckpt_every``, and the plan's last step.

The loop compares the step with one number, ``next_due``, per optimizer step; the rest is
worked out only when that step comes.
"""

from __future__ import annotations

import math

from .step_meter import LogClock, Window


class StepCadence:
    def __init__(
        self,
        step: int,
        last_step: float,
        log_every: int | None,
        log_interval_s: float,
        val_every: int | None,
        ckpt_every: int | None,
    ):
        self.clock = LogClock(log_every, log_interval_s)
        self.last_step, self.val_every, self.ckpt_every = last_step, val_every, ckpt_every
        self.next_log = step + self.clock.every
        self.next_due: float = step + 1  # inf once nothing is left to fall due

    def log_due(self, step: int) -> bool:
        return step >= self.next_log

    def validation_due(self, step: int) -> bool:
        return bool(self.val_every and step % self.val_every == 0)

    def checkpoint_due(self, step: int) -> bool:
        return bool(self.ckpt_every and step % self.ckpt_every == 0)

    def logged(self, step: int, window: Window) -> None:
        """A log at ``step``: the clock picks the next one from the window's pace."""
        self.next_log = step + self.clock.next(window)
        self.next_due = min(self.next_due, self.next_log)

    def passed(self, step: int) -> None:
        """What was due at ``step`` is done: the next step anything falls due."""
        self.next_due = min(
            self.next_log, self.last_step, _next_multiple(step, self.val_every), _next_multiple(step, self.ckpt_every)
        )


def _next_multiple(step: int, every: int | None) -> float:
    return (step // every + 1) * every if every else math.inf
