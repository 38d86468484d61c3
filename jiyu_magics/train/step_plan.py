"""How long a ``fit`` call trains, fixed before its first step: epochs, steps per epoch and the
total, from the data's length (when it has one) and the options."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .loop_position import LoopPosition
from .train_errors import TrainConfigError


@dataclass(frozen=True)
class StepPlan:
    batches_per_epoch: int | None  # None: an iterable without a length
    steps_per_epoch: int | None  # optimizer steps (batches / accum, rounded up)
    epochs: int | None  # None: as many as max_steps needs
    total_steps: int | None  # None: unknown (no length and no max_steps)
    accum: int = 1

    @classmethod
    def of(cls, data, epochs: int | None, max_steps: int | None, accum: int) -> StepPlan:
        try:
            batches: int | None = len(data)
        except TypeError:
            batches = None
        if batches == 0:
            raise TrainConfigError(
                "the training data has no batches (empty dataset, or drop_last with fewer samples than one batch)"
            )
        epochs = epochs or (None if max_steps else 1)
        per_epoch = math.ceil(batches / accum) if batches else None
        planned = per_epoch * epochs if per_epoch and epochs else None
        return cls(batches, per_epoch, epochs, min(filter(None, (planned, max_steps)), default=None), accum)

    @property
    def last_step(self) -> float:
        return self.total_steps if self.total_steps is not None else math.inf

    def finished(self, position: LoopPosition) -> bool:
        return (self.total_steps is not None and position.step >= self.total_steps) or (
            self.epochs is not None and position.epoch > self.epochs
        )

    def group_size(self, batch_in_epoch: int) -> int:
        """Micro-batches in the next optimizer step: ``accum``, fewer at an epoch's end."""
        if self.accum == 1 or self.batches_per_epoch is None:
            return self.accum
        return min(self.accum, self.batches_per_epoch - batch_in_epoch)

    def epoch_complete(self, batch_in_epoch: int) -> bool:
        return self.batches_per_epoch is not None and batch_in_epoch >= self.batches_per_epoch
