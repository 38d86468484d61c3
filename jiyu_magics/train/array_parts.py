"""A tensor, an array or a list split into one part per rank along its first dimension, and
parts joined back in rank order: ``%ranks scatter`` and ``%ranks gather``. torch's and numpy's
own splitting and joining (``tensor_split``, ``array_split``: parts differ by at most one row
when the length does not divide)."""

from __future__ import annotations

from typing import Any

import torch


def split(value: Any, parts: int) -> list[Any]:
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise TypeError("a 0-d tensor has no first dimension to split")
        return [part.clone() for part in torch.tensor_split(value, parts, dim=0)]
    numpy = _numpy()
    if numpy is not None and isinstance(value, numpy.ndarray):
        if value.ndim == 0:
            raise TypeError("a 0-d array has no first dimension to split")
        return [part.copy() for part in numpy.array_split(value, parts, axis=0)]
    if isinstance(value, (list, tuple)):
        size, extra = divmod(len(value), parts)
        bounds = [rank * size + min(rank, extra) for rank in range(parts + 1)]
        return [value[bounds[rank] : bounds[rank + 1]] for rank in range(parts)]
    raise TypeError(f"cannot split a {type(value).__name__}: a tensor, a numpy array, a list or a tuple")


def join(parts: list[Any]) -> Any:
    if all(isinstance(part, torch.Tensor) for part in parts):
        return torch.cat(parts, dim=0)
    numpy = _numpy()
    if numpy is not None and all(isinstance(part, numpy.ndarray) for part in parts):
        return numpy.concatenate(parts, axis=0)
    if all(isinstance(part, list) for part in parts):
        return [item for part in parts for item in part]
    if all(isinstance(part, tuple) for part in parts):
        return tuple(item for part in parts for item in part)
    kinds = sorted({type(part).__name__ for part in parts})
    raise TypeError(f"cannot join {', '.join(kinds)}: every rank's must be a tensor, a numpy array, a list or a tuple")


def _numpy():
    try:
        import numpy
    except ImportError:
        return None
    return numpy
