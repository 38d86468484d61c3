"""Validation: mean loss and, for class-index targets, accuracy over the whole validation set.

Sums stay on the device until the end (one sync), and ranks add theirs in one collective.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .batches import BatchLoss, correct_predictions, samples_in, to_device
from .precision import Precision
from .process_group import DistContext


def evaluate(
    model: torch.nn.Module,
    batches,
    batch_loss: BatchLoss,
    precision: Precision,
    device: torch.device,
    dist: DistContext,
    between_batches: Callable[[], None] = lambda: None,
) -> tuple[float | None, float | None]:
    """(mean loss, accuracy or None). ``between_batches`` lets the dashboard poll during a long pass."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=device)  # loss * samples, correct, counted
    count = 0
    move = device.type != "cpu"
    try:
        with torch.no_grad():
            for batch in batches.epoch(0):
                if move:
                    batch = to_device(batch, device)
                with precision.autocast():
                    loss, logits, targets = batch_loss(model, batch)
                n = samples_in(batch)
                sums[0] += loss.detach().double() * n
                count += n
                hits = correct_predictions(logits, targets)
                if hits is not None:
                    sums[1] += hits[0]
                    sums[2] += hits[1]
                between_batches()
    finally:
        model.train()
    loss_sum, correct, counted, samples = dist.reduce([*sums.tolist(), count], "sum", device)
    return (loss_sum / samples if samples else None), (correct / counted if counted else None)
