"""What a batch is and how a loss comes out of it.

Three shapes are understood without help: ``(inputs..., targets)`` tuples with a ``loss_fn``;
dicts passed as keyword arguments to the model (Hugging Face style: the output's ``.loss``, or
``loss_fn(logits, batch["labels"])``); and anything else through a user ``train_step(model,
batch) -> loss``. The same function serves validation, which also wants logits for accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from .train_errors import TrainConfigError

LossFn = Callable[[Any, Any], torch.Tensor]
StepFn = Callable[[torch.nn.Module, Any], Any]
IGNORE_INDEX = -100  # the label value losses and accuracy skip (PyTorch and Hugging Face convention)
TrainLoss = Callable[[torch.nn.Module, Any], torch.Tensor]  # (model, batch) -> the loss of one micro-batch


def to_device(batch: Any, device: torch.device) -> Any:
    """The batch with every tensor on ``device``, copied without blocking the host. Tensors
    already there are returned as they are (no call at all: this runs every step)."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):  # a plain dict: the model takes it as keyword arguments
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def samples_in(batch: Any) -> int:
    """The batch size: the first dimension of the first tensor found."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor) and batch[0].dim():
        return len(batch[0])  # the common case, without a walk or an ABC check
    values = batch if isinstance(batch, (list, tuple)) else batch.values() if isinstance(batch, Mapping) else ()
    for value in values:
        n = samples_in(value)
        if n:
            return n
    return 0


class BatchLoss:
    """Computes ``(loss, logits, targets)`` for one batch; logits/targets are ``None`` when
    the batch shape does not expose them (then no accuracy is reported)."""

    def __init__(self, loss_fn: LossFn | None = None, train_step: StepFn | None = None):
        self.loss_fn = loss_fn
        self.train_step = train_step

    def __call__(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, Any, Any]:
        if self.train_step is not None:
            return loss_of(self.train_step(model, batch), "train_step"), None, None
        if isinstance(batch, (list, tuple)) and len(batch) >= 2:  # before Mapping: ABC checks cost a microsecond
            return self._tuple_batch(model, batch)
        if isinstance(batch, Mapping):
            return self._dict_batch(model, batch)
        raise TrainConfigError(
            f"a batch of type {type(batch).__name__} is neither (inputs, targets) nor a dict; "
            "define train_step(model, batch) -> loss"
        )

    def train_loss(self, batch: Any) -> TrainLoss:
        """The loss function for batches shaped like ``batch``, decided once: ``(inputs,
        targets)`` pairs skip the general dispatch (about a microsecond a step on small models)."""
        loss_fn = self.loss_fn
        if self.train_step is None and loss_fn is not None and type(batch) in (tuple, list) and len(batch) == 2:

            def pair_loss(model, batch):
                if len(batch) != 2:
                    return self(model, batch)[0]
                return loss_fn(model(batch[0]), batch[1])

            return pair_loss
        return lambda model, batch: self(model, batch)[0]

    def _tuple_batch(self, model: torch.nn.Module, batch: Sequence[Any]) -> tuple[torch.Tensor, Any, Any]:
        *inputs, targets = batch
        if self.loss_fn is None:
            raise TrainConfigError(
                "batches are (inputs, targets) but there is no loss_fn; "
                "define loss_fn (e.g. torch.nn.CrossEntropyLoss()) or train_step"
            )
        outputs = model(*inputs)
        return self.loss_fn(outputs, targets), outputs, targets

    def _dict_batch(self, model: torch.nn.Module, batch: Mapping[str, Any]) -> tuple[torch.Tensor, Any, Any]:
        if self.loss_fn is not None and "labels" in batch:
            outputs = model(**{k: v for k, v in batch.items() if k != "labels"})
            logits = logits_of(outputs)
            return self.loss_fn(logits, batch["labels"]), logits, batch["labels"]
        outputs = model(**batch)
        return loss_of(outputs, "the model"), logits_of(outputs), batch.get("labels")


def loss_of(output: Any, source: str) -> torch.Tensor:
    """The loss in a model or step output: a tensor, ``.loss``, or ``["loss"]``."""
    if isinstance(output, torch.Tensor):
        loss = output
    elif isinstance(output, Mapping) and "loss" in output:
        loss = output["loss"]
    elif getattr(output, "loss", None) is not None:
        loss = output.loss
    else:
        raise TrainConfigError(
            f"{source} returned {type(output).__name__} without a loss; return the loss tensor, or define loss_fn"
        )
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TrainConfigError(f"{source} must produce a scalar loss tensor, got {_describe(loss)}")
    return loss


def logits_of(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        return output.get("logits")
    return getattr(output, "logits", None)


def correct_predictions(logits: Any, targets: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(number correct, number counted) as device tensors for class-index targets, else None."""
    if not (isinstance(logits, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if logits.dim() < 2 or targets.dtype.is_floating_point or logits.shape[:-1] != targets.shape:
        return None
    counted = targets != IGNORE_INDEX
    correct = (logits.argmax(-1) == targets) & counted
    return correct.sum(), counted.sum()


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__
