"""The training loop behind ``fit`` and ``%%train``.

One loop for three places: the kernel (one device), each torchrun rank (DDP/FSDP), and a
background job. Per step it does what a hand-written loop does plus a few list appends and a
clock read: losses stay on the device until the next log (wall-clock paced, ~0.5 s), the
dashboard is polled by wall clock, and the stop flag is a plain attribute.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from . import rng_state as rng
from .batches import BatchLoss, samples_in, to_device
from .checkpoint import CheckpointKeeper, load_checkpoint
from .input_checks import check_objects, trainable_parameters
from .stop_signal import StopSignal, leave_for_requeue, signals_request_stop
from .batch_source import training_batches, validation_batches
from .process_group import join_process_group
from .train_errors import NonFiniteLoss, TrainConfigError, TrainingFailed
from .evaluate import evaluate
from .weight_handoff import final_weights_path, load_initial_weights, write_weights
from .end_messages import input_bound_advice, nonfinite_message, oom_message, stopped_message, succeeded_message
from .step_meter import LogClock, StepMeter
from .fit_options import FitOptions
from .precision import resolve_precision
from .reporter import Reporter
from .fit_result import FitResult
from .run_binding import RunBinding, default_name, resume_path
from .checkpoint_state import load_model_optimizer_state, load_other_states, model_optimizer_state, other_states
from .model_wrap import uses_ddp, uses_fsdp, wrap_model

END = object()
NO_CONTEXT = nullcontext()
ADVICE_AFTER_STEPS = 20  # data wait in the first steps is warm-up (worker start), not a pattern


def fit(model: torch.nn.Module, optimizer: torch.optim.Optimizer, train_data: Any, *, loss_fn=None,
        train_step=None, val_data=None, scheduler=None, monitor=None, stop: StopSignal | None = None,
        **options) -> FitResult:
    """Train ``model`` and return a :class:`FitResult` (history, run id, checkpoints, status).

    ``train_data``: a DataLoader, a Dataset or tensors with ``batch_size=``, or any re-iterable
    of batches. Batches are ``(inputs..., targets)`` with ``loss_fn(outputs, targets)``, dicts
    for ``model(**batch)`` (its ``.loss``, or ``loss_fn(logits, batch["labels"])``), or anything
    with ``train_step(model, batch) -> loss``. Options: see :class:`FitOptions` (epochs,
    max_steps, amp, accum, clip, compile, device, seed, log_every, val_every, ckpt_every,
    ckpt_dir, resume, strategy, ...).

    Stopped runs (Stop button, kernel interrupt, SIGTERM in jobs) return with status
    ``stopped`` and a checkpoint; a stop for a scheduler's time limit (SIGUSR1 in jobs) ends the
    process after its checkpoint, for the scheduler to requeue it. NaN/Inf loss and out-of-memory raise :class:`TrainingFailed`
    (its ``.result`` has status ``failed``); other errors are recorded in the run and re-raised.
    """
    opts = FitOptions.from_kwargs(options)
    trainer = Trainer(model, optimizer, train_data, loss_fn=loss_fn, train_step=train_step, val_data=val_data,
                      scheduler=scheduler, monitor=monitor, stop=stop, options=opts)
    result = trainer.run()
    leave_for_requeue(trainer.stop)
    return result


class Trainer:
    def __init__(self, model, optimizer, train_data, *, loss_fn=None, train_step=None, val_data=None,
                 scheduler=None, monitor=None, stop=None, options: FitOptions | None = None):
        check_objects(model, optimizer, train_data, scheduler, loss_fn, train_step)
        self.raw_model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.train_data, self.val_data = train_data, val_data
        self.batch_loss = BatchLoss(loss_fn, train_step)
        self.monitor = monitor
        self.stop = stop or StopSignal()
        self.opts = options or FitOptions()
        self.step, self.epoch, self.batch_in_epoch, self.start_step = 0, 1, 0, 0
        self.last_ckpt_step: int | None = None
        self.stop_agreed = False
        self.advised = False
        self.epoch_rng: list[dict] | None = None
        self.resume_rng: list[dict] | None = None
        self.resumed_from: str | None = None

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> FitResult:
        self.started = time.perf_counter()
        self.dist, self.device = join_process_group(self.opts.device)
        failed = True
        try:
            self._prepare()
            self.run_binding = RunBinding.open(self.name, self.dist, self._params())
            self.report = Reporter(self.run_binding, self.dist, self.monitor, started=self.started)
            try:
                with signals_request_stop(self.stop):
                    result = self._execute()
                    failed = False
                    return result
            finally:
                self.run_binding.close()
        finally:
            self.train_model = None  # the DDP wrapper (and its reducer) goes before the group it uses
            self.dist.close(failed=failed)

    def _prepare(self) -> None:
        """Everything that can reject the input, before a run is registered."""
        opts = self.opts
        self.name = opts.name or default_name(self.raw_model)
        self.raw_model.to(self.device)
        if opts.seed is not None:
            rng.seed_everything(opts.seed)
        self.data_seed = self.dist.broadcast(opts.seed if opts.seed is not None else
                                             int(torch.randint(0, 2**31 - 1, ()).item()))
        self.data = training_batches(self.train_data, batch_size=opts.batch_size, shuffle=opts.shuffle,
                                     drop_last=opts.drop_last, fast=opts.fast_data, seed=self.data_seed,
                                     rank=self.dist.rank, world_size=self.dist.world_size)
        self.val_batches = validation_batches(self.val_data, batch_size=opts.batch_size, fast=opts.fast_data,
                                              rank=self.dist.rank, world_size=self.dist.world_size)
        self._plan_steps()
        self.precision = resolve_precision(opts.amp, self.device)
        self.scaler = self.precision.scaler
        self.move_batches = self.device.type != "cpu"
        self.sharded = self.dist.distributed and opts.strategy == "fsdp"
        if self.move_batches and hasattr(self.data, "place"):
            self.data.place(self.device)

    def _plan_steps(self) -> None:
        try:
            self.batches_per_epoch: int | None = len(self.data)
        except TypeError:
            self.batches_per_epoch = None
        if self.batches_per_epoch == 0:
            raise TrainConfigError("the training data has no batches (empty dataset, or drop_last with "
                                   "fewer samples than one batch)")
        opts = self.opts
        self.epochs = opts.epochs or (None if opts.max_steps else 1)
        per_epoch = math.ceil(self.batches_per_epoch / opts.accum) if self.batches_per_epoch else None
        self.steps_per_epoch = per_epoch
        planned = per_epoch * self.epochs if per_epoch and self.epochs else None
        self.total_steps = min(filter(None, (planned, opts.max_steps)), default=None)

    def _params(self) -> dict:
        return {k: v for k, v in vars(self.opts).items() if v is not None}

    def _execute(self) -> FitResult:
        try:
            self._start()
            self._loop()
        except NonFiniteLoss as error:
            raise TrainingFailed(self._end("failed", self._nonfinite(error))) from None
        except torch.OutOfMemoryError as error:
            raise TrainingFailed(self._end("failed", self._release_memory(error))) from None
        except KeyboardInterrupt:  # a second interrupt: stop now, mid-step, without a checkpoint
            return self._end("stopped", stopped_message(self.step, self.total_steps, self._last_step_epoch(),
                                                        self.stop.reason, self._last_checkpoint()))
        except BaseException as error:
            self.report.error(error, self.step)
            raise
        return self._end("stopped" if self._stopping() else "succeeded")

    def _start(self) -> None:
        self.params_count = sum(p.numel() for p in self.raw_model.parameters())
        load_initial_weights(self.raw_model)  # %%train --nproc: the kernel's weights, before wrapping
        self.train_model = wrap_model(self.raw_model, self.optimizer, self.device, self.dist, self.opts.strategy,
                                      self.opts.compile)
        self.params = trainable_parameters(self.raw_model)  # sharded ones under FSDP
        self.ddp = uses_ddp(self.train_model) and self.batches_per_epoch is not None
        self.fsdp = uses_fsdp(self.raw_model) and self.batches_per_epoch is not None
        self._resume()
        self.start_step = self.step
        self.step_scheduler = self.scheduler is not None and self.opts.scheduler_interval == "step"
        self.keeper = CheckpointKeeper(self._ckpt_folder(), self.opts.keep_ckpts, self.run_binding.checkpoint_label)
        self.meter = StepMeter(self.device)
        self.meter.reset(time.perf_counter(), self.step)
        self.log_clock = LogClock(self.opts.log_every, self.opts.log_interval_s)
        # read every step: plain attributes, looked up once here
        self.clip, self.val_every, self.ckpt_every = self.opts.clip, self.opts.val_every, self.opts.ckpt_every
        self.distributed = self.dist.distributed
        self.plain = not self.distributed and self.precision.mode == "off" and self.opts.accum == 1
        self.train_loss = None  # chosen from the first batch
        self.last_step = self.total_steps if self.total_steps is not None else math.inf
        self.next_due = self.step + 1
        self.next_log = self.step + self.log_clock.every
        self.train_model.train()
        self._emit_start()
        self.report.poll()

    def _ckpt_folder(self) -> Path:
        return Path(self.opts.ckpt_dir).expanduser() if self.opts.ckpt_dir else self.run_binding.files.ckpt

    def _emit_start(self) -> None:
        self.report.emit(
            "start", run_id=self.run_binding.run_id, name=self.name, total_steps=self.total_steps,
            epochs=self.epochs, steps_per_epoch=self.steps_per_epoch, nproc=self.dist.world_size,
            batch_size=self.data.batch_size, accum=self.opts.accum, amp=self.precision.mode,
            device=str(self.device), params=self.params_count, strategy=self._strategy_name(),
            backend=self.dist.backend, data=self.data.kind, start_step=self.step, resumed_from=self.resumed_from)

    def _strategy_name(self) -> str:
        if not self.dist.distributed:
            return "single"
        return "fsdp" if self.opts.strategy == "fsdp" else "ddp"

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._finished():
            self._run_epoch()
        self._log_pending()
        self._checkpoint()

    def _finished(self) -> bool:
        return (self._stopping() or (self.total_steps is not None and self.step >= self.total_steps)
                or (self.epochs is not None and self.epoch > self.epochs))

    def _stopping(self) -> bool:
        return self.stop_agreed if self.dist.distributed else self.stop.requested

    def _run_epoch(self) -> None:
        batches = self._epoch_batches()
        meter, clock, stop, report = self.meter, time.perf_counter, self.stop, self.report
        micro_step, optimizer_step = self._micro_step, self._optimizer_step
        group, micro = self._group_size(), 0
        while True:
            waited = clock()
            batch = next(batches, END)
            meter.data_wait += clock() - waited
            if batch is END:
                break
            self.batch_in_epoch += 1
            micro += 1
            micro_step(batch, group, micro == group)
            if micro < group:
                continue
            optimizer_step()
            micro = 0
            # one comparison per step in the common case; the rest only when something is due
            if self.step >= self.next_due or clock() >= report.next_poll or stop.requested:
                if self._after_step() and not self._epoch_complete():
                    return
            if group != 1:
                group = self._group_size()
        if micro:  # an iterable without a length ended inside an accumulation group
            self._optimizer_step()
            self._after_step()
        self._end_epoch()

    def _epoch_batches(self):
        """This epoch's batches. A resume mid-epoch replays the epoch's start (its RNG state,
        so a shuffling loader draws the same order), skips what was trained, then continues
        from the RNG state of the checkpoint."""
        rank = self.dist.rank
        if self.resume_rng is not None and self.batch_in_epoch:
            rng.restore(_for_rank(self.epoch_rng, rank))
            batches = self.data.epoch(self.epoch, self.batch_in_epoch)
            rng.restore(_for_rank(self.resume_rng, rank))
        else:
            if self.resume_rng is not None:
                rng.restore(_for_rank(self.resume_rng, rank))
            self.epoch_rng = [rng.capture()]
            batches = self.data.epoch(self.epoch)
        self.resume_rng = None
        return iter(batches)

    def _group_size(self) -> int:
        accum = self.opts.accum
        if accum == 1 or self.batches_per_epoch is None:
            return accum
        return min(accum, self.batches_per_epoch - self.batch_in_epoch)

    def _epoch_complete(self) -> bool:
        return self.batches_per_epoch is not None and self.batch_in_epoch >= self.batches_per_epoch

    def _micro_step(self, batch, group: int, sync: bool) -> None:
        if self.move_batches:
            batch = to_device(batch, self.device)
        if self.train_loss is None:
            self.train_loss = self.batch_loss.train_loss(batch)
        if self.plain:  # one process, no AMP, no accumulation: nothing to wrap the step in
            loss = self.train_loss(self.train_model, batch)
            loss.backward()
        else:
            loss = self._forward_backward(batch, group, sync)
        meter = self.meter
        meter.losses.append(loss.detach())
        if group > 1:
            meter.loss_steps.append(self.step + 1)
        meter.samples += samples_in(batch)

    def _forward_backward(self, batch, group: int, sync: bool) -> torch.Tensor:
        if group > 1 and self.fsdp:
            self.raw_model.set_requires_gradient_sync(sync)  # reduce-scatter on the last micro-batch only
        # DDP all-reduces gradients on the group's last micro-batch only
        with self.train_model.no_sync() if self.ddp and not sync else NO_CONTEXT:
            with self.precision.autocast():
                loss = self.train_loss(self.train_model, batch)
            scaled = loss / group if group > 1 else loss
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()
        return loss

    def _optimizer_step(self) -> None:
        optimizer, scaler = self.optimizer, self.scaler
        if self.clip is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            self.meter.norms.append(torch.nn.utils.clip_grad_norm_(self.params, self.clip))
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if self.step_scheduler:
            self.scheduler.step()
        self.step += 1

    def _after_step(self) -> bool:
        """Logs, validates, checkpoints and polls the dashboard when due; True when training ends."""
        step = self.step
        if step >= self.next_log:
            self._log()
        if self.val_every and step % self.val_every == 0:
            self._validate()
        if self.ckpt_every and step % self.ckpt_every == 0:
            self._checkpoint()
        self.report.poll_if_due()
        self.next_due = min(self.next_log, self.last_step, _next_multiple(step, self.val_every),
                            _next_multiple(step, self.ckpt_every))
        stopping = self.stop_agreed if self.distributed else self.stop.requested
        return stopping or step >= self.last_step

    def _end_epoch(self) -> None:
        self._log_pending()
        if self.val_batches is not None and not self.opts.val_every:
            self._validate()
        if self.scheduler is not None and self.opts.scheduler_interval == "epoch":
            self._scheduler_epoch_step()
        self.epoch += 1
        self.batch_in_epoch = 0
        if not self.opts.ckpt_every:
            self._checkpoint()

    def _scheduler_epoch_step(self) -> None:
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            history = self.report.history
            val = next((r["val_loss"] for r in reversed(history) if r.get("val_loss") is not None), None)
            last = next((r["loss"] for r in reversed(history) if r.get("loss") is not None), None)
            self.scheduler.step(val if val is not None else last)
        else:
            self.scheduler.step()

    # -- logging, validation, checkpoints ----------------------------------------------------
    def _log_pending(self) -> None:
        if self.meter.losses:
            self._log()

    def _log(self) -> None:
        window = self.meter.read(self.dist, self.step, self.stop.requested)
        self.next_log = self.step + self.log_clock.next(window)
        self.next_due = min(self.next_due, self.next_log)
        if window.first_bad_step is not None:
            raise NonFiniteLoss(window.first_bad_step, window.bad_value)
        self.stop_agreed = self.stop_agreed or window.stop
        self.report.step(self.step, self.epoch, self.total_steps, window, self._lr())
        self._advise(window.data_wait)

    def _lr(self) -> float | None:
        lr = self.optimizer.param_groups[0].get("lr")
        return float(lr) if lr is not None else None

    def _advise(self, data_wait: float | None) -> None:
        if self.advised or self.step < ADVICE_AFTER_STEPS:
            return
        message = input_bound_advice(data_wait, self.device.type, self.train_data,
                                     local_world_size=self.dist.world_size)
        if message:
            self.advised = True
            self.report.emit("advice", step=self.step, message=message)

    def _validate(self) -> None:
        loss, accuracy = evaluate(self.train_model, self.val_batches, self.batch_loss, self.precision, self.device,
                                  self.dist, self.report.poll_if_due)
        self.report.emit("val", step=self.step, epoch=self.epoch, loss=loss, accuracy=accuracy)

    def _checkpoint(self) -> None:
        if not self.opts.save_ckpts or self.last_ckpt_step == self.step:
            return
        state = self._state()
        path = self.keeper.save(state, self.step, write=self.dist.is_writer)
        self.report.emit("ckpt", step=self.step, path=str(path))
        self.last_ckpt_step = self.step

    def _state(self) -> dict:
        model, optimizer = model_optimizer_state(self.raw_model, self.optimizer, self.sharded)
        return {
            "model": model, "optimizer": optimizer, **other_states(self.scaler, self.scheduler),
            "step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "rng": self.dist.gather(rng.capture()),
            "epoch_rng": self.dist.gather(_for_rank(self.epoch_rng, self.dist.rank)),
            "data_seed": self.data_seed, "world_size": self.dist.world_size,
            "run_id": self.run_binding.run_id, "total_steps": self.total_steps,
        }

    def _resume(self) -> None:
        path = resume_path(self.opts.resume, self.run_binding, self.name) if self.dist.is_writer else None
        path = self.dist.broadcast(str(path) if path else None)
        if path is None:
            return
        state = load_checkpoint(path, map_location=self.device)
        load_model_optimizer_state(self.raw_model, self.optimizer, state, path, self.sharded)
        load_other_states(state, self.scaler, self.scheduler)
        self.step, self.epoch = state["step"], state["epoch"]
        # the same samples consumed globally when the number of ranks changed (same batch size per rank)
        self.batch_in_epoch = state["batch_in_epoch"] * state["world_size"] // self.dist.world_size
        self.data.seed = self.data_seed = state["data_seed"]
        self.epoch_rng, self.resume_rng = state["epoch_rng"], state["rng"]
        self.last_ckpt_step, self.resumed_from = self.step, path

    # -- the end ----------------------------------------------------------------------------
    def _last_checkpoint(self) -> str | None:
        keeper = getattr(self, "keeper", None)
        return str(keeper.last) if keeper is not None and keeper.last else None

    def _end(self, status: str, message: str | None = None) -> FitResult:
        if status != "failed":
            self._hand_back_weights()
        message = message or self._message(status, self.report.elapsed)
        self.report.end(status, self.step, message)
        checkpoints = [str(p) for p in self.keeper.saved] if hasattr(self, "keeper") else []
        return FitResult(run_id=self.run_binding.run_id, status=status, message=message, step=self.step,
                         epoch=self._last_step_epoch(), total_steps=self.total_steps, elapsed=self.report.elapsed,
                         history=self.report.history, checkpoints=checkpoints)

    def _hand_back_weights(self) -> None:
        """``%%train --nproc``: rank 0 writes the final full weights for the kernel to load
        (every rank takes part in gathering them under FSDP)."""
        path = final_weights_path()
        if path is None or not hasattr(self, "train_model"):
            return
        model, _ = model_optimizer_state(self.raw_model, self.optimizer, self.sharded)
        if self.dist.is_writer:
            write_weights(model, path, self.step)

    def _last_step_epoch(self) -> int:
        """The epoch the last step belonged to (the counter has moved on at an epoch end)."""
        return self.epoch - 1 if self.batch_in_epoch == 0 and self.step > self.start_step else self.epoch

    def _message(self, status: str, elapsed: float) -> str:
        if status == "stopped":
            return stopped_message(self.step, self.total_steps, self._last_step_epoch(), self.stop.reason,
                                   self._last_checkpoint())
        history = self.report.history
        last = history[-1] if history else {}
        val_acc = next((r["val_acc"] for r in reversed(history) if r.get("val_acc") is not None), None)
        return succeeded_message(self.step, self.start_step, self._last_step_epoch(), elapsed, last.get("loss"),
                                 val_acc)

    def _nonfinite(self, error: NonFiniteLoss) -> str:
        return nonfinite_message(error.step, error.value, self._last_checkpoint(), self.last_ckpt_step,
                                 self.precision.mode, self.opts.clip is not None)

    def _release_memory(self, error: torch.OutOfMemoryError) -> str:
        """Frees what the failed step held (its traceback pins the activations) and the
        allocator cache, so the kernel can go on."""
        error.__traceback__ = None
        self.optimizer.zero_grad(set_to_none=True)
        if hasattr(self, "meter"):
            self.meter.reset(time.perf_counter(), self.step)
        gc.collect()
        peak = total = None
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.empty_cache()
        return oom_message(self.step + 1, peak, total, self.data.batch_size, self.opts.accum, self.precision.mode)

def _next_multiple(step: int, every: int | None) -> float:
    return (step // every + 1) * every if every else math.inf


def _for_rank(states: list[dict], rank: int) -> dict:
    return states[rank] if len(states) > rank else states[0]
