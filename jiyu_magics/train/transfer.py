"""Objects to and from a pool's ranks as pickles whose tensors and arrays travel beside them.

A plain pickle copies a tensor's bytes into the pickle (and torch's own reduction goes through
``torch.save``), so a 40 MB push was copied several times on each side. Here pickle protocol 5
keeps the data out of band: a CPU tensor (a parameter, a buffer inside a module, a tensor in a
dict) and a numpy array go as raw buffers that the channel sends without copying, and the
receiver makes each one writable memory with a single copy. Anything else pickles as usual.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and _plain_cpu(obj):
            data = obj.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
            kind = "parameter" if isinstance(obj, torch.nn.Parameter) else "tensor"
            return _tensor, (pickle.PickleBuffer(data), str(obj.dtype), tuple(obj.shape), obj.requires_grad, kind)
        return NotImplemented


def _plain_cpu(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu" and tensor.layout is torch.strided and not tensor.is_quantized


def _tensor(buffer: Any, dtype: str, shape: tuple, requires_grad: bool, kind: str) -> torch.Tensor:
    """Rebuilt on the memory ``loads`` made writable for it (no further copy)."""
    raw = torch.frombuffer(buffer, dtype=torch.uint8) if len(buffer) else torch.empty(0, dtype=torch.uint8)
    tensor = raw.view(getattr(torch, dtype.removeprefix("torch."))).reshape(shape)
    if kind == "parameter":
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def dumps(obj: Any) -> list[Any]:
    """``[pickle, *raw buffers]``: what ``loads`` takes back."""
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(obj)
    return [out.getbuffer(), *(buffer.raw() for buffer in buffers)]


def loads(parts: list[Any]) -> Any:
    """The object ``dumps`` made; each raw buffer copied once into memory of its own, so the
    tensors and arrays made on it are writable and outlive the message."""
    return pickle.loads(parts[0], buffers=[bytearray(part) for part in parts[1:]])
