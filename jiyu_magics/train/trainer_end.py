"""How one ``fit`` call ends: the result it returns, the one line that says what happened and
what to do next, the weights handed back to the kernel, and the memory a failed step held.

``Trainer`` (``engine.py``) takes these methods as a base class; they read the loop's state
that its set-up makes (declared once, in ``trainer_state.py``). The messages
themselves are worded in ``end_messages.py``; here is what they are told.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import torch

from ..core.runs.model import RunStatus
from .checkpoint_state import full_model_state
from .end_messages import nonfinite_message, oom_message, resume_command, stopped_message, succeeded_message
from .fit_calls import restored_message
from .fit_result import FitResult
from .train_errors import NonFiniteLoss
from .trainer_state import TrainerState
from .weight_handoff import write_weights


class TrainerEnd(TrainerState):
    """The end of one ``fit`` call, whichever way it ends."""

    def _last_checkpoint(self) -> str | None:
        return str(self.keeper.last) if self.keeper.last else None

    def _end(self, status: RunStatus, message: str | None = None, step: int | None = None) -> FitResult:
        if status is not RunStatus.FAILED:
            self._hand_back_weights()
        message = message or self._message(status, self.report.elapsed)
        position = self.position
        step = position.step if step is None else step
        self.report.end(status, step, message)
        return FitResult(
            run_id=self.run_binding.run_id,
            status=status,
            message=message,
            step=step,
            epoch=position.last_step_epoch(),
            total_steps=self.plan.total_steps,
            elapsed=self.report.elapsed,
            history=self.report.history,
            checkpoints=[str(p) for p in self.keeper.saved],
        )

    def _hand_back_weights(self) -> None:
        """``%%train --nproc``: rank 0 writes the final full weights for the kernel to load
        (every rank takes part in gathering them under FSDP). Not when stopped before the
        model was wrapped: there is nothing trained to hand back."""
        path = Path(self.context.final_weights) if self.context.final_weights else None
        if path is None or self.steps is None:
            return
        model = full_model_state(self.raw_model, self.sharded)
        if self.dist.is_writer:
            write_weights(model, path, self.position.step)

    def _message(self, status: RunStatus, elapsed: float) -> str:
        if status is RunStatus.STOPPED:
            return self._stopped_message()
        if self.restored_final and self.resumed_from is not None:
            return restored_message(self.position.step, self.resumed_from)
        history, position = self.report.history, self.position
        last = history[-1] if history else {}
        val_acc = next((r["val_acc"] for r in reversed(history) if r.get("val_acc") is not None), None)
        return succeeded_message(
            position.step, position.start_step, position.last_step_epoch(), elapsed, last.get("loss"), val_acc
        )

    def _stopped_message(self) -> str:
        position = self.position
        return stopped_message(
            position.step,
            self.plan.total_steps,
            position.last_step_epoch(),
            self.stop.reason,
            self._last_checkpoint(),
            self._resume_command(),
        )

    def _resume_command(self) -> str:
        return resume_command(self.name, self.plan.epochs, self.opts.max_steps)

    def _nonfinite(self, error: NonFiniteLoss) -> str:
        return nonfinite_message(
            error.step,
            error.value,
            self._last_checkpoint(),
            self.keeper.last_step,
            self.precision.mode,
            self.opts.clip is not None,
            error.what,
        )

    def _release_memory(self, error: torch.OutOfMemoryError) -> str:
        """Frees what the failed step held (its traceback pins the activations) and the
        allocator cache, so the kernel can go on."""
        error.__traceback__ = None
        self.optimizer.zero_grad(set_to_none=True)
        self.meter.reset(time.perf_counter(), self.position.step)
        gc.collect()
        peak = total = None
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.empty_cache()
        return oom_message(
            self.position.step + 1, peak, total, self.data.batch_size, self.opts.accum, self.precision.mode
        )
