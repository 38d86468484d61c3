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
from pathlib import Path
from typing import Any

import torch

from ..core.processes import job_stop
from ..core.runs.files import runs_root
from ..core.runs.launch_context import LaunchContext
from ..core.runs.model import RunStatus
from . import rng_state as rng
from .batch_source import training_batches, validation_batches
from .batches import BatchLoss
from .checkpoint import checkpoint_folder_usable, load_checkpoint, load_state_file, run_folder_usable
from .checkpoint_files import is_sharded
from .checkpoint_keeper import CheckpointKeeper
from .checkpoint_state import (
    full_model_state,
    load_model_optimizer_state,
    load_other_states,
    model_optimizer_state,
    other_states,
)
from .end_messages import (
    input_bound_advice,
    nonfinite_message,
    oom_message,
    resume_command,
    stopped_message,
    succeeded_message,
)
from .evaluate import evaluate
from .finite_check import FiniteGuard
from .fit_calls import is_own_after_restart, own_checkpoints, restored_message, starts_afresh
from .fit_options import FitOptions, tracked
from .fit_result import FitResult
from .input_checks import check_objects, trainable_parameters
from .intact_checkpoint import first_intact
from .loop_position import LoopPosition
from .model_wrap import uses_ddp, uses_fsdp, wrap_model
from .precision import resolve_precision
from .process_group import join_process_group
from .reporter import Reporter
from .run_binding import RunBinding, check_resume_request, default_name, resume_candidates
from .run_facts import class_name, optimizer_groups, options_of, plain
from .schedule_check import schedule_mismatch
from .stack_signal import stacks_on_signal
from .step_cadence import StepCadence
from .step_meter import StepMeter
from .step_plan import StepPlan
from .step_runner import StepRunner
from .stop_signal import StopSignal, leave_for_requeue, signals_request_stop
from .train_errors import NonFiniteLoss, TrainingFailed
from .weight_handoff import load_initial_weights, write_weights

END = object()
ADVICE_AFTER_STEPS = 20  # data wait in the first steps is warm-up (worker start), not a pattern


def fit(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_data: Any,
    *,
    loss_fn=None,
    train_step=None,
    val_data=None,
    scheduler=None,
    monitor=None,
    stop: StopSignal | None = None,
    from_notebook: str | None = None,
    config: dict | None = None,
    context: LaunchContext | None = None,
    **options,
) -> FitResult:
    """Train ``model`` and return a :class:`FitResult` (history, run id, checkpoints, status).

    ``train_data``: a DataLoader, a Dataset or tensors with ``batch_size=``, or any re-iterable
    of batches. Batches are ``(inputs..., targets)`` with ``loss_fn(outputs, targets)``, dicts
    for ``model(**batch)`` (its ``.loss``, or ``loss_fn(logits, batch["labels"])``), or anything
    with ``train_step(model, batch) -> loss``. Options: see :class:`FitOptions` (epochs,
    max_steps, amp, accum, clip, compile, device, seed, log_every, val_every, ckpt_every,
    ckpt_dir, resume, strategy, ...). ``from_notebook``: a line for the run's header naming the
    objects the caller took from a notebook's namespace rather than its own cell (``%%train``).
    ``config``: the values that describe this run (``%%train`` passes the notebook's
    ``parameters`` cell), recorded as the run's parameters for comparison with other runs.
    ``context``: what this process's launcher said (its run, a resume, weights handed over, its
    place in a torchrun world); read from the environment here, once, when not given.

    Stopped runs (Stop button, kernel interrupt, SIGTERM in jobs) return with status
    ``stopped`` and a checkpoint; a stop for a scheduler's time limit (SIGUSR1 in jobs) ends the
    process after its checkpoint, for the scheduler to requeue it; in a job that was asked to
    stop, a later ``fit`` does not start (``JobStopped``: the job ends cleanly). NaN/Inf loss and
    out-of-memory raise :class:`TrainingFailed`
    (its ``.result`` has status ``failed``); other errors are recorded in the run and re-raised.
    """
    opts = FitOptions.from_kwargs(options)
    trainer = Trainer(
        model,
        optimizer,
        train_data,
        loss_fn=loss_fn,
        train_step=train_step,
        val_data=val_data,
        scheduler=scheduler,
        monitor=monitor,
        stop=stop,
        options=opts,
        from_notebook=from_notebook,
        config=config,
        context=context or LaunchContext.from_environ(),
    )
    result = trainer.run()
    leave_for_requeue(trainer.stop)
    return result


class Trainer:
    """One ``fit`` call. Its state lives in a few small objects, each made once: where the loop
    is (``position``), how long it runs (``plan``), when logs, validation and checkpoints fall
    due (``cadence``), the step itself (``steps``), precision, and the process group (``dist``)."""

    def __init__(
        self,
        model,
        optimizer,
        train_data,
        *,
        loss_fn=None,
        train_step=None,
        val_data=None,
        scheduler=None,
        monitor=None,
        stop=None,
        options: FitOptions | None = None,
        from_notebook: str | None = None,
        config: dict | None = None,
        context: LaunchContext | None = None,
    ):
        check_objects(model, optimizer, train_data, scheduler, loss_fn, train_step)
        self.from_notebook = from_notebook
        self.config = {str(k): plain(v) for k, v in (config or {}).items()}
        self.raw_model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.train_data, self.val_data = train_data, val_data
        self.batch_loss = BatchLoss(loss_fn, train_step)
        self.monitor = monitor
        self.stop = stop or StopSignal()
        self.opts = options or FitOptions()
        self.context = context or LaunchContext()
        self.position = LoopPosition()
        self.steps: StepRunner | None = None  # made when the model is wrapped, dropped before the group
        self.stop_agreed = False
        self.advised = False
        self.resumed_from: str | None = None
        self.parent: tuple[str, int] | None = None  # resumed from another run's checkpoint: (run id, step)
        self.restored_final = False  # resumed from its own final checkpoint: nothing to train

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> FitResult:
        job_stop.refuse_training()  # a job asked to stop trains no further call
        self.started = time.perf_counter()
        self.dist, self.device = join_process_group(self.opts.device, self.context)
        failed = True
        try:
            self._prepare()
            self._open_run()
            try:
                with (
                    signals_request_stop(self.stop, self.context.launched),
                    stacks_on_signal(self.dist.rank, self.context.run_id),
                ):
                    result = self._execute()
                    failed = False
                    return result
            finally:
                self.run_binding.close()
        finally:
            self.steps = None  # the DDP wrapper (and its reducer) goes before the group it uses
            self.dist.close(failed=failed)

    def _prepare(self) -> None:
        """Everything that can reject the input, before a run is registered."""
        opts = self.opts
        self.name = opts.name or default_name(self.raw_model, self.context.notebook)
        self.raw_model.to(self.device)
        if opts.seed is not None:
            rng.seed_everything(opts.seed)
        self.data_seed = self.dist.broadcast(
            opts.seed if opts.seed is not None else int(torch.randint(0, 2**31 - 1, ()).item())
        )
        self.data = training_batches(
            self.train_data,
            batch_size=opts.batch_size,
            shuffle=opts.shuffle,
            drop_last=opts.drop_last,
            fast=opts.fast_data,
            seed=self.data_seed,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
        )
        self.val_batches = validation_batches(
            self.val_data,
            batch_size=opts.batch_size,
            fast=opts.fast_data,
            rank=self.dist.rank,
            world_size=self.dist.world_size,
        )
        self.plan = StepPlan.of(self.data, opts.epochs, opts.max_steps, opts.accum)
        self.precision = resolve_precision(opts.amp, self.device)
        self.sharded = self.dist.distributed and opts.strategy == "fsdp"
        self.data.place(self.device)
        if opts.save_ckpts and self.dist.is_writer:
            if opts.ckpt_dir:
                checkpoint_folder_usable(Path(opts.ckpt_dir).expanduser())
            else:
                run_folder_usable(runs_root())
        if not self.dist.distributed:
            check_resume_request(opts.resume, self.name, self.context)
        self.track = tracked(opts.track, self.context.track)  # the call's, else the default (JIYU_TRACK)

    def _open_run(self) -> None:
        """The run this call writes into, and what records its progress there."""
        self.run_binding = RunBinding.open(self.name, self.dist, self._params(), self.context, track=self.track)
        self.run_binding.hold_device(self.device, self.dist.distributed)
        self.report = Reporter(self.run_binding, self.dist, self.monitor, started=self.started)
        self.keeper = CheckpointKeeper(
            self._ckpt_folder(), self.opts.keep_ckpts, self.run_binding.checkpoint_label, sharded=self.sharded
        )
        self.meter = StepMeter(self.device)

    def _params(self) -> dict:
        """What the run store lists as the run's parameters: the ``config`` (the notebook's
        parameters cell); the options go into the ``start`` event."""
        return dict(self.config)

    def _execute(self) -> FitResult:
        try:
            self._start()
            self._loop()
        except NonFiniteLoss as error:  # one step count: the result ends where the loss went bad
            raise TrainingFailed(self._end(RunStatus.FAILED, self._nonfinite(error), step=error.step)) from None
        except torch.OutOfMemoryError as error:
            raise TrainingFailed(self._end(RunStatus.FAILED, self._release_memory(error))) from None
        except KeyboardInterrupt:  # a second interrupt: stop now, mid-step, without a checkpoint
            return self._end(RunStatus.STOPPED, self._stopped_message())
        except BaseException as error:
            self.report.error(error, self.position.step)
            raise
        return self._end(RunStatus.STOPPED if self._stopping() else RunStatus.SUCCEEDED)

    def _start(self) -> None:
        params_count = sum(p.numel() for p in self.raw_model.parameters())
        load_initial_weights(
            self.raw_model, self.context.init_weights
        )  # %%train --nproc: the kernel's weights, before wrapping
        self.steps = self._step_runner()
        self._resume()
        self.finite = FiniteGuard(self.raw_model)  # what must stay finite: the weights as they start
        position, opts = self.position, self.opts
        position.start_step = position.step
        self.meter.reset(time.perf_counter(), position.step)
        self.cadence = StepCadence(
            position.step, self.plan.last_step, opts.log_every, opts.log_interval_s, opts.val_every, opts.ckpt_every
        )
        self.steps.train_model.train()
        self._emit_start(params_count)
        self._advise_on_schedule()
        self.report.poll()

    def _runner(self) -> StepRunner:
        """The step runner, which exists from ``_start`` until the process group goes."""
        if self.steps is None:
            raise RuntimeError("the model is not wrapped for training yet")
        return self.steps

    def _step_runner(self) -> StepRunner:
        opts, dist, known_length = self.opts, self.dist, self.plan.batches_per_epoch is not None
        train_model = wrap_model(self.raw_model, self.optimizer, self.device, dist, opts.strategy, opts.compile)
        return StepRunner(
            train_model,
            self.raw_model,
            self.optimizer,
            batch_loss=self.batch_loss,
            precision=self.precision,
            device=self.device,
            meter=self.meter,
            params=trainable_parameters(self.raw_model),  # sharded under FSDP
            clip=opts.clip,
            scheduler=self.scheduler if opts.scheduler_interval == "step" else None,
            ddp=uses_ddp(train_model) and known_length,
            fsdp=uses_fsdp(self.raw_model) and known_length,
            plain=not dist.distributed and self.precision.mode == "off" and opts.accum == 1,
        )

    def _ckpt_folder(self) -> Path:
        """Absolute: the ``ckpt`` events record where each checkpoint is, for ``--resume last``."""
        return Path(self.opts.ckpt_dir).expanduser().absolute() if self.opts.ckpt_dir else self.run_binding.files.ckpt

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

    # -- the loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while not (self._stopping() or self.plan.finished(self.position)):
            self._run_epoch()
        self._log_pending()
        self._checkpoint()

    def _stopping(self) -> bool:
        return self.stop_agreed if self.dist.distributed else self.stop.requested

    def _run_epoch(self) -> None:
        batches = self._epoch_batches()
        position, cadence, meter, clock, stop, report = (
            self.position,
            self.cadence,
            self.meter,
            time.perf_counter,
            self.stop,
            self.report,
        )
        steps = self._runner()
        micro_step, optimizer_step, group_size = steps.micro_step, steps.optimizer_step, self.plan.group_size
        group, micro = group_size(position.batch_in_epoch), 0
        while True:
            waited = clock()
            batch = next(batches, END)
            meter.data_wait += clock() - waited
            if batch is END:
                break
            position.batch_in_epoch += 1
            micro += 1
            micro_step(batch, group, micro == group)
            if group > 1:
                meter.loss_steps.append(position.step + 1)
            if micro < group:
                continue
            optimizer_step()
            position.step += 1
            micro = 0
            # one comparison per step in the common case; the rest only when something is due
            if position.step >= cadence.next_due or clock() >= report.next_poll or stop.requested:
                if self._after_step() and not self.plan.epoch_complete(position.batch_in_epoch):
                    return
            if group != 1:
                group = group_size(position.batch_in_epoch)
        if micro:  # an iterable without a length ended inside an accumulation group
            optimizer_step()
            position.step += 1
            self._after_step()
        self._end_epoch()

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

    def _after_step(self) -> bool:
        """Logs, validates, checkpoints and polls the dashboard when due; True when training ends."""
        step, cadence = self.position.step, self.cadence
        if cadence.log_due(step):
            self._log()
        if cadence.validation_due(step):
            self._validate()
        if cadence.checkpoint_due(step):
            self._checkpoint()
        self.report.poll_if_due()
        cadence.passed(step)
        return self._stopping() or step >= cadence.last_step

    def _end_epoch(self) -> None:
        self._log_pending()
        if self.val_batches is not None and not self.opts.val_every:
            self._validate()
        if self.scheduler is not None and self.opts.scheduler_interval == "epoch":
            self._scheduler_epoch_step()
        self.position.next_epoch()
        if not self.opts.ckpt_every:
            self._checkpoint()

    def _scheduler_epoch_step(self) -> None:
        if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            history = self.report.history
            val = next((r["val_loss"] for r in reversed(history) if r.get("val_loss") is not None), None)
            last = next((r["loss"] for r in reversed(history) if r.get("loss") is not None), None)
            metric = val if val is not None else last
            if metric is not None:  # no loss logged yet: nothing to judge a plateau by
                self.scheduler.step(metric)
        else:
            self.scheduler.step()

    # -- logging, validation, checkpoints ----------------------------------------------------
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

    def _advise_on_schedule(self) -> None:
        remaining = self.plan.total_steps - self.position.step if self.plan.total_steps is not None else None
        message = schedule_mismatch(
            self.scheduler, self.opts.scheduler_interval, remaining, self.opts.accum, self.dist.world_size
        )
        if message:
            self.report.emit("advice", step=self.position.step, message=message)

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

    # -- the end ----------------------------------------------------------------------------
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


def new_rank_seed(data_seed: int, salt: int, rank: int) -> int:
    return (data_seed * 1_000_003 + salt * 7_919 + rank) % 2**63
