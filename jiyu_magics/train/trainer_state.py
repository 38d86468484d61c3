"""The state one ``fit`` call's set-up makes (``Trainer._prepare`` and ``_start`` in
``engine.py``), declared once: the sides of the loop kept in their own modules
(``trainer_reports``, ``trainer_checkpoints``, ``trainer_end``) are base classes of ``Trainer``
and read it, so mypy checks each of them against one list."""

from __future__ import annotations

from typing import Any

import torch

from ..core.runs.launch_context import LaunchContext
from .batch_source import LoaderBatches, TensorBatches
from .batches import BatchLoss
from .checkpoint_keeper import CheckpointKeeper
from .finite_check import FiniteGuard
from .fit_options import FitOptions
from .loop_position import LoopPosition
from .precision import Precision
from .process_group import DistContext
from .reporter import Reporter
from .run_binding import RunBinding
from .step_cadence import StepCadence
from .step_meter import StepMeter
from .step_plan import StepPlan
from .step_runner import StepRunner
from .stop_signal import StopSignal


class TrainerState:
    """What ``Trainer`` holds while one ``fit`` call runs."""

    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    train_data: Any
    val_batches: Any
    batch_loss: BatchLoss
    opts: FitOptions
    context: LaunchContext
    name: str
    from_notebook: str | None
    config: dict
    track: Any
    stop: StopSignal
    stop_agreed: bool
    advised: bool
    dist: DistContext
    device: torch.device
    data: TensorBatches | LoaderBatches
    data_seed: int
    plan: StepPlan
    precision: Precision
    sharded: bool
    position: LoopPosition
    cadence: StepCadence
    steps: StepRunner | None
    run_binding: RunBinding
    report: Reporter
    keeper: CheckpointKeeper
    meter: StepMeter
    finite: FiniteGuard
    resumed_from: str | None
    parent: tuple[str, int] | None  # resumed from another run's checkpoint: (run id, step)
    restored_final: bool  # resumed from its own final checkpoint: nothing to train
