"""The training loop behind ``fit`` and ``%%train``.

One loop for three places: the kernel (one device), each torchrun rank (DDP/FSDP), and a
background job. Per step it does what a hand-written loop does plus a few list appends and a
clock read: losses stay on the device until the next log (wall-clock paced, ~0.5 s), the
dashboard is polled by wall clock, and the stop flag is a plain attribute.
"""

from __future__ import annotations

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
from .checkpoint import checkpoint_folder_usable, run_folder_usable
from .checkpoint_keeper import CheckpointKeeper
from .finite_check import FiniteGuard
from .fit_options import FitOptions, tracked
from .fit_result import FitResult
from .input_checks import check_objects, trainable_parameters
from .loop_position import LoopPosition
from .model_wrap import uses_ddp, uses_fsdp, wrap_model
from .precision import resolve_precision
from .process_group import join_process_group
from .reporter import Reporter
from .run_binding import RunBinding, check_resume_request, default_name
from .run_facts import plain
from .stack_signal import stacks_on_signal
from .step_cadence import StepCadence
from .step_meter import StepMeter
from .step_plan import StepPlan
from .step_runner import StepRunner
from .stop_signal import StopSignal, leave_for_requeue, signals_request_stop
from .train_errors import NonFiniteLoss, TrainingFailed
from .trainer_checkpoints import TrainerCheckpoints
from .trainer_end import TrainerEnd
from .trainer_reports import TrainerReports
from .weight_handoff import load_initial_weights

END = object()


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
    return run_fit(**locals())  # fit's arguments by name: nothing else is bound yet


def run_fit(model, optimizer, train_data, *, options: dict, context: LaunchContext | None, **objects) -> FitResult:
    """``fit``'s arguments as the loop takes them, and the call run. The options are checked into
    a :class:`FitOptions` (an unknown or invalid one fails here, before anything runs), the
    launcher's context read from the environment, once, when the caller gave none; a stop for a
    scheduler's time limit ends the process after the call has closed its run and group."""
    opts, context = FitOptions.from_kwargs(options), context or LaunchContext.from_environ()
    trainer = Trainer(model, optimizer, train_data, options=opts, context=context, **objects)
    result = trainer.run()
    leave_for_requeue(trainer.stop)
    return result


class Trainer(TrainerReports, TrainerCheckpoints, TrainerEnd):
    """One ``fit`` call. Its state lives in a few small objects, each made once: where the loop
    is (``position``), how long it runs (``plan``), when logs, validation and checkpoints fall
    due (``cadence``), the step itself (``steps``), precision, and the process group (``dist``).
    Set-up and the loop are here; what it reports, its checkpoints and resume, and its end are
    its base classes (``trainer_reports``, ``trainer_checkpoints``, ``trainer_end``)."""

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
        job_stop.speak_as(self.context.rank)  # only rank 0 says a stop
        job_stop.refuse_training()  # a job asked to stop trains no further call
        self.started = time.perf_counter()
        self.dist, self.device = join_process_group(self.opts.device, self.context)
        failed = True
        try:
            self._prepare()
            self._open_run()
            try:
                with (
                    signals_request_stop(self.stop, self.context.launched, escalate=self.context.pool_rank),
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

    def _after_step(self) -> bool:
        """Logs, validates, checkpoints and polls the dashboard when due; True when training ends."""
        step, cadence = self.position.step, self.cadence
        self.stop.passed_step(step, time.perf_counter())
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
