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

    def convert_accum(self, saved: int, accum: int, plan) -> str | None:
        """A resume with another ``--accum``: a step is one optimizer step, ``accum``
        micro-batches, so the checkpoint's step count is converted to this call's steps at the
        same place in the data (its epoch and micro-batch). None when nothing changed, else
        the line that says so."""
        if not isinstance(saved, int) or saved < 1 or saved == accum:
            return None
        before = self.step
        per_epoch = -(-plan.batches_per_epoch // accum) if plan.batches_per_epoch else None
        if per_epoch is not None:
            self.step = (self.epoch - 1) * per_epoch + -(-self.batch_in_epoch // accum)
        else:
            self.step = self.step * saved // accum
        self.last_ckpt_step = self.step
        return (
            f"the checkpoint counted steps of --accum {saved}; this call's of --accum {accum}: its step {before} "
            f"is step {self.step} here, at the same place in the data (epoch {self.epoch}, "
            f"micro-batch {self.batch_in_epoch})"
        )

    def next_epoch(self) -> None:
        self.epoch += 1
        self.batch_in_epoch = 0

    def last_step_epoch(self) -> int:
        """The epoch the last step belonged to (the counter has moved on at an epoch end)."""
        return self.epoch - 1 if self.batch_in_epoch == 0 and self.step > self.start_step else self.epoch
