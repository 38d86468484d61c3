"""Where the training loop is: what a checkpoint saves of it and a resume restores.

The step loop reads and bumps these counters every (micro-)step through a local name bound to
this object once per epoch, so keeping them here costs the loop nothing over plain attributes
of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoopPosition:
    step: int = 0  # optimizer steps taken, over every call that resumed
    epoch: int = 1  # the epoch under way (it moves on at an epoch's end)
    batch_in_epoch: int = 0  # micro-batches of this epoch trained on
    start_step: int = 0  # the step this call started from (after a resume)
    last_ckpt_step: int | None = None  # the step of the newest checkpoint, saved or resumed
    epoch_rng: list[dict] | None = None  # RNG states at this epoch's start, one per rank
    resume_rng: list[dict] | None = None  # RNG states to continue from after a resume, once

    def restore(self, state: dict, world_size: int) -> None:
        """From a checkpoint. When the number of ranks changed, the same samples were consumed
        globally (the batch size per rank is the same)."""
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"] * state["world_size"] // world_size
        self.epoch_rng, self.resume_rng = state["epoch_rng"], state["rng"]
        self.last_ckpt_step = self.step

    def next_epoch(self) -> None:
        self.epoch += 1
        self.batch_in_epoch = 0

    def last_step_epoch(self) -> int:
        """The epoch the last step belonged to (the counter has moved on at an epoch end)."""
        return self.epoch - 1 if self.batch_in_epoch == 0 and self.step > self.start_step else self.epoch
