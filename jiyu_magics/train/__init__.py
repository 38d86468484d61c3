"""The training engine: the only package of jiyu_magics that imports torch.

``fit(model, optimizer, train_loader, loss_fn=...)`` trains with AMP, gradient accumulation,
clipping, atomic checkpoints, exact resume, a live event log and, under torchrun, DDP/FSDP.

The names below are loaded on first use: importing a torch-free module of this package (the
option declaration ``fit_options``, read by ``%%train`` at ``%load_ext`` time) must not pull in
the engine and torch.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPORTS = {
    "fit": ".engine",
    "FitResult": ".fit_result",
    "FitOptions": ".fit_options",
    "leave_process_group": ".process_group",
    "share_training_state": ".shared_state",
    "StopSignal": ".stop_signal",
    "TrainConfigError": ".train_errors",
    "TrainingFailed": ".train_errors",
}

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
