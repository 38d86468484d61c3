"""The checkpoint side of the training loop: what a checkpoint holds besides the weights, the
check before one is written, and the exact resume from one.

``Trainer`` (``engine.py``) takes these methods as a base class; they read and set the loop's
state that its set-up makes (declared once, in ``trainer_state.py``). A resume puts the
loop back at the batch it left: weights, optimizer, scaler and scheduler, the loop's position,
and every rank's RNG state at the epoch's start and at the checkpoint, so a shuffling loader
draws the same order and the steps after it see the same random numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from . import rng_state as rng
from .checkpoint import load_checkpoint, load_state_file
from .checkpoint_files import is_sharded
from .checkpoint_state import load_model_optimizer_state, load_other_states, model_optimizer_state, other_states
from .fit_calls import is_own_after_restart, own_checkpoints, starts_afresh
from .intact_checkpoint import first_intact
from .run_binding import resume_candidates
from .train_errors import NonFiniteLoss
from .trainer_state import TrainerState


class TrainerCheckpoints(TrainerState):
    """Checkpoints written and resumed from, for one ``fit`` call."""

    _log: Callable[[], None]  # the loop's log (trainer_reports.py): raises NonFiniteLoss at a bad loss

    def _ckpt_folder(self) -> Path:
        """Absolute: the ``ckpt`` events record where each checkpoint is, for ``--resume last``."""
        return Path(self.opts.ckpt_dir).expanduser().absolute() if self.opts.ckpt_dir else self.run_binding.files.ckpt

    def _checkpoint(self) -> None:
        """A file checkpoint written by rank 0, or under FSDP a sharded one every rank writes."""
        position = self.position
        if not self.opts.save_ckpts or position.last_ckpt_step == position.step:
            return
        self._refuse_nonfinite()
        state, step = self._loop_state(), position.step
        if self.sharded:
            path = self.keeper.save_sharded(self.raw_model, self.optimizer, state, step, self.dist)
        else:
            model, optimizer = model_optimizer_state(self.raw_model, self.optimizer)
            path = self.keeper.save({"model": model, "optimizer": optimizer, **state}, step, write=self.dist.is_writer)
        self.report.emit("ckpt", step=step, path=str(path))
        position.last_ckpt_step = step

    def _refuse_nonfinite(self) -> None:
        """Before every checkpoint: a NaN written there would rotate the good checkpoints out.
        The check reads one flag (a checkpoint syncs anyway); when it fails, the pending losses
        name the exact step, else the weights went bad while the loss still looked finite."""
        finite = self.finite.holds(self.meter.losses)
        if not self.dist.reduce([0.0 if finite else 1.0], "max", self.device)[0]:
            return
        if self.meter.losses:
            self._log()  # raises NonFiniteLoss at the first bad loss
        raise NonFiniteLoss(self.position.step, math.nan, what="weights")

    def _loop_state(self) -> dict:
        """Everything a checkpoint holds besides the model and optimizer (every rank's RNG)."""
        position, dist = self.position, self.dist
        return {
            **other_states(self.precision.scaler, self.scheduler),
            "step": position.step,
            "epoch": position.epoch,
            "batch_in_epoch": position.batch_in_epoch,
            "rng": dist.gather(rng.capture()),
            # before an epoch drew its first batch, it starts from the RNG state of now
            "epoch_rng": dist.gather(position.epoch_rng[0] if position.epoch_rng else rng.capture()),
            "data_seed": self.data_seed,
            "world_size": dist.world_size,
            "run_id": self.run_binding.run_id,
            "total_steps": self.plan.total_steps,
            "call": self.run_binding.call.as_state(),
            "optimizer_class": type(self.optimizer).__name__,  # a resume checks it before loading
            "accum": self.opts.accum,  # what a step was: a resume with another --accum converts
        }

    def _resume(self) -> None:
        candidates = [str(p) for p in self._resume_candidates()] if self.dist.is_writer else None
        candidates = self.dist.broadcast(candidates)
        if not candidates:
            return
        path = first_intact(candidates, self.dist)  # every file's checksum, before anything loads
        # a file checkpoint is checked on the CPU before anything loads: a refusal costs no GPU memory
        if is_sharded(Path(path)):
            state = load_state_file(path, verified=True)
        else:
            state = load_checkpoint(path, map_location="cpu", verified=True)
        load_model_optimizer_state(self.raw_model, self.optimizer, state, path, self.sharded, self.dist.distributed)
        load_other_states(state, self.precision.scaler, self.scheduler)
        self.position.restore(state, self.dist.world_size)
        converted = self.position.convert_accum(state.get("accum", self.opts.accum), self.opts.accum, self.plan)
        if converted and self.dist.is_writer:
            print(f"jiyu: {converted}")  # what the resume did, said as output: a notebook paints stderr pink
        self.data.seed = self.data_seed = state["data_seed"]
        self.resumed_from = path
        writer = state.get("run_id")
        if isinstance(writer, str) and writer != self.run_binding.run_id:  # not a restart of this run
            self.parent = (writer, int(state["step"]))
        self.restored_final = self.plan.finished(self.position) and is_own_after_restart(
            state, self.run_binding.call, self.context.relaunched
        )

    def _resume_candidates(self) -> list[Path]:
        """Relaunched (a torchrun restart, a requeue): this call's own checkpoints, newest first,
        whatever it asked for (they are newer than anything it started from); else what it asked
        for (``--resume last``: that run's, newest first)."""
        own = own_checkpoints(self._ckpt_folder(), self.run_binding.call, self.context.relaunched)
        if own or starts_afresh(self.opts.resume, self.run_binding.owned, self.context.relaunched):
            return own
        return resume_candidates(self.opts.resume, self.run_binding, self.name)

    def _epoch_batches(self):
        """This epoch's batches. A resume mid-epoch replays the epoch's start (its RNG state,
        so a shuffling loader draws the same order), skips what was trained, then continues
        from the RNG state of the checkpoint. ``position.epoch_rng`` holds this rank's state
        at the epoch's start, for the next checkpoint."""
        position = self.position
        if position.resume_rng is not None and position.epoch_rng is not None and position.batch_in_epoch:
            self._restore_rng(position.epoch_rng, position.epoch)
            position.epoch_rng = [rng.capture()]
            batches = self.data.epoch(position.epoch, position.batch_in_epoch)
            self._restore_rng(position.resume_rng, position.step)
        else:
            if position.resume_rng is not None:
                self._restore_rng(position.resume_rng, position.step)
            position.epoch_rng = [rng.capture()]
            batches = self.data.epoch(position.epoch)
        position.resume_rng = None
        return iter(batches)

    def _restore_rng(self, states: list[dict], salt: int) -> None:
        """This rank's RNG state from a checkpoint (one per rank that saved it). A rank it has
        none for (resumed on more ranks than saved it) gets streams of its own, seeded from the
        run's data seed, ``salt`` (the epoch or step) and the rank: reproducible, and not a copy
        of another rank's (which would repeat its dropout masks and augmentations)."""
        rank = self.dist.rank
        if rank < len(states):
            rng.restore(states[rank])
        else:
            rng.seed_everything(new_rank_seed(self.data_seed, salt, rank))


def new_rank_seed(data_seed: int, salt: int, rank: int) -> int:
    return (data_seed * 1_000_003 + salt * 7_919 + rank) % 2**63
