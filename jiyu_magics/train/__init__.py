"""The training engine: the only package of jiyu_magics that imports torch.

``fit(model, optimizer, train_loader, loss_fn=...)`` trains with AMP, gradient accumulation,
clipping, atomic checkpoints, exact resume, a live event log and, under torchrun, DDP/FSDP.
"""

from .stop_signal import StopSignal
from .engine import fit
from .train_errors import TrainConfigError, TrainingFailed
from .fit_options import FitOptions
from .fit_result import FitResult

__all__ = ["fit", "FitResult", "FitOptions", "StopSignal", "TrainConfigError", "TrainingFailed"]
