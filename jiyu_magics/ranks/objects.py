"""Objects between a kernel and its ranks: each as a pickle with its tensors and arrays beside it
(``train.transfer``), so a push or a pull copies their data once on each side, not four times.

A message carries several objects as one run of buffers and how many buffers each one took.
The kernel uses the tensor-aware pickler only once torch is imported there (an object holding a
tensor has imported it); a push of a plain dict does not import torch into the kernel.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Sequence
from typing import Any


def pack(values: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """(buffers per value, the buffers); pickle's own error for what cannot be pickled."""
    counts, buffers = [], []
    for value in values:
        parts = _dumps(value)
        counts.append(len(parts))
        buffers.extend(parts)
    return counts, buffers


def unpack(counts: Sequence[int], buffers: Sequence[Any]) -> list[Any]:
    """The values ``pack`` made, in order; each raw buffer copied once into writable memory."""
    values, at = [], 0
    for count in counts:
        parts = buffers[at : at + count]
        values.append(pickle.loads(parts[0], buffers=[bytearray(part) for part in parts[1:]]))
        at += count
    return values


def _dumps(value: Any) -> list[Any]:
    if "torch" in sys.modules:
        from ..train.transfer import dumps

        return dumps(value)
    out, raw = io.BytesIO(), list[pickle.PickleBuffer]()
    pickle.Pickler(out, protocol=5, buffer_callback=raw.append).dump(value)
    return [out.getbuffer(), *(buffer.raw() for buffer in raw)]
