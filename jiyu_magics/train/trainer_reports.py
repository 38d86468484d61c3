"""What the training loop tells its run: the ``start`` event that describes the call, the step
logs, validation and the advice it gives along the way (input-bound steps, a schedule that does
not match the run's length).

``Trainer`` (``engine.py``) takes these methods as a base class; they read the loop's state
that its set-up makes (declared once, in ``trainer_state.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .end_messages import input_bound_advice
from .evaluate import evaluate
from .run_facts import class_name, optimizer_groups, options_of
from .schedule_check import schedule_mismatch
from .step_runner import StepRunner
from .train_errors import NonFiniteLoss
from .trainer_state import TrainerState

ADVICE_AFTER_STEPS = 20  # data wait in the first steps is warm-up (worker start), not a pattern


class TrainerReports(TrainerState):
    """The events one ``fit`` call writes into its run, besides checkpoints and its end."""

    _runner: Callable[[], StepRunner]  # the loop's (engine.py): the wrapped model, once it is wrapped

    def _params(self) -> dict:
        """What the run store lists as the run's parameters: the ``config`` (the notebook's
        parameters cell); the options go into the ``start`` event."""
        return dict(self.config)

    def _emit_start(self, params_count: int) -> None:
        plan = self.plan
        self.report.emit(
            "start",
            run_id=self.run_binding.run_id,
            name=self.name,
            total_steps=plan.total_steps,
            epochs=plan.epochs,
            steps_per_epoch=plan.steps_per_epoch,
            nproc=self.dist.world_size,
            batch_size=self.data.batch_size,
            accum=self.opts.accum,
            amp=self.precision.mode,
            device=str(self.device),
            params=params_count,
            strategy=self._strategy_name(),
            backend=self.dist.backend,
            data=self.data.kind,
            start_step=self.position.step,
            resumed_from=self.resumed_from,
            from_notebook=self.from_notebook,
            stall_timeout=self.opts.stall_timeout,
            track=",".join(self.track) or None,
            model=class_name(self.raw_model),
            optimizer=class_name(self.optimizer),
            optimizer_groups=optimizer_groups(self.optimizer),
            scheduler=class_name(self.scheduler),
            config=self.config,
            options=options_of(self.opts),
            parent_run=self.parent[0] if self.parent else None,
            parent_step=self.parent[1] if self.parent else None,
        )

    def _strategy_name(self) -> str:
        if not self.dist.distributed:
            return "single"
        return "fsdp" if self.opts.strategy == "fsdp" else "ddp"

    def _log_pending(self) -> None:
        if self.meter.losses:
            self._log()

    def _log(self) -> None:
        step = self.position.step
        window = self.meter.read(self.dist, step, self.stop.requested)
        self.cadence.logged(step, window)
        if window.first_bad_step is not None:
            raise NonFiniteLoss(window.first_bad_step, math.nan if window.bad_value is None else window.bad_value)
        self.stop_agreed = self.stop_agreed or window.stop
        self.report.step(step, self.position.epoch, self.plan.total_steps, window, self._lr())
        self._advise(window.data_wait)

    def _lr(self) -> float | None:
        lr = self.optimizer.param_groups[0].get("lr")
        return float(lr) if lr is not None else None

    def _advise(self, data_wait: float | None) -> None:
        if self.advised or self.position.step < ADVICE_AFTER_STEPS:
            return
        message = input_bound_advice(
            data_wait, self.device.type, self.train_data, local_world_size=self.dist.world_size
        )
        if message:
            self.advised = True
            self.report.emit("advice", step=self.position.step, message=message)

    def _validate(self) -> None:
        loss, accuracy = evaluate(
            self._runner().train_model,
            self.val_batches,
            self.batch_loss,
            self.precision,
            self.device,
            self.dist,
            self.report.validating(self.position.step, self.opts.log_interval_s),
        )
        self.report.emit("val", step=self.position.step, epoch=self.position.epoch, loss=loss, accuracy=accuracy)

    def _advise_on_schedule(self) -> None:
        remaining = self.plan.total_steps - self.position.step if self.plan.total_steps is not None else None
        message = schedule_mismatch(
            self.scheduler, self.opts.scheduler_interval, remaining, self.opts.accum, self.dist.world_size
        )
        if message:
            self.report.emit("advice", step=self.position.step, message=message)
