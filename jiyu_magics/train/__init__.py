"""The training engine: the only package of jiyu_magics that imports torch.

``fit(model, optimizer, train_loader, loss_fn=...)`` trains with AMP, gradient accumulation,
clipping, atomic checkpoints, exact resume, a live event log and, under torchrun, DDP/FSDP.
"""

from .control import StopSignal
from .engine import fit
from .errors import TrainConfigError, TrainingFailed
from .options import FitOptions
from .result import FitResult

__all__ = ["fit", "FitResult", "FitOptions", "StopSignal", "TrainConfigError", "TrainingFailed"]
