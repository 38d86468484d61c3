"""One optimizer step: forward and backward of each micro-batch, then the optimizer step.

This is the code that runs for every batch, so everything it reads is a plain attribute of
this object, looked up once when the model is wrapped: no attribute chains, no option lookups,
no branches that cannot change during a call.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from .batches import BatchLoss, TrainLoss, samples_in, to_device
from .precision import Precision
from .step_meter import StepMeter

NO_CONTEXT = nullcontext()


class StepRunner:
    def __init__(
        self,
        train_model: torch.nn.Module,
        raw_model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        batch_loss: BatchLoss,
        precision: Precision,
        device: torch.device,
        meter: StepMeter,
        params: list,
        clip: float | None,
        scheduler=None,
        ddp: bool = False,
        fsdp: bool = False,
        plain: bool = False,
    ):
        self.train_model, self.raw_model, self.optimizer = train_model, raw_model, optimizer
        self.batch_loss, self.precision, self.scaler = batch_loss, precision, precision.scaler
        self.device, self.move_batches = device, device.type != "cpu"
        self.meter, self.params, self.clip = meter, params, clip
        self.scheduler = scheduler  # stepped after each optimizer step; None: not here
        self.ddp, self.fsdp = ddp, fsdp  # gradient sync only on a group's last micro-batch
        self.plain = plain  # one process, no AMP, no accumulation: nothing to wrap
        self.train_loss: TrainLoss | None = None  # chosen from the first batch

    def micro_step(self, batch, group: int, sync: bool) -> None:
        if self.move_batches:
            batch = to_device(batch, self.device)
        train_loss = self.train_loss
        if train_loss is None:
            train_loss = self.train_loss = self.batch_loss.train_loss(batch)
        if self.plain:
            loss = train_loss(self.train_model, batch)
            loss.backward()
        else:
            loss = self._forward_backward(train_loss, batch, group, sync)
        meter = self.meter
        meter.losses.append(loss.detach())
        meter.samples += samples_in(batch)

    def _forward_backward(self, train_loss: TrainLoss, batch, group: int, sync: bool) -> torch.Tensor:
        # FSDP2's and DDP's own methods: torch types a module's dynamic attributes as Tensor | Module
        if group > 1 and self.fsdp:
            # reduce-scatter on the last micro-batch only
            self.raw_model.set_requires_gradient_sync(sync)  # type: ignore[operator]
        # DDP all-reduces gradients on the group's last micro-batch only
        with self.train_model.no_sync() if self.ddp and not sync else NO_CONTEXT:  # type: ignore[operator]
            with self.precision.autocast():
                loss = train_loss(self.train_model, batch)
            scaled = loss / group if group > 1 else loss
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()
        return loss

    def optimizer_step(self) -> None:
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
        if self.scheduler is not None:
            self.scheduler.step()
