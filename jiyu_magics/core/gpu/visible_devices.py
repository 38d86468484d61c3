"""``CUDA_VISIBLE_DEVICES`` as the CUDA runtime reads it.

Entries are indices or (prefixes of) ``GPU-``/``MIG-`` UUIDs. The runtime stops at the first
entry it cannot match, so ``0,x,1`` shows only GPU 0: we reproduce that rather than guess, so
``%gpu_status`` and the doctor say which physical GPU each ``cuda:N`` is.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VisibleDevices:
    raw: str | None  # the variable's value, None when unset
    order: list[int] = field(default_factory=list)  # physical indices, in cuda:N order
    invalid: str | None = None  # the first entry the runtime would reject
    mig: list[str] = field(default_factory=list)  # MIG instance UUIDs (not GPUs NVML lists)

    @property
    def restricted(self) -> bool:
        return self.raw is not None

    def visible_index(self, physical_index: int) -> int | None:
        """``cuda:N`` of a physical GPU, or None when it is hidden."""
        try:
            return self.order.index(physical_index)
        except ValueError:
            return None


def parse_visible_devices(raw: str | None, uuids: list[str]) -> VisibleDevices:
    """Resolve the variable against the devices NVML reports (``uuids[i]`` is GPU ``i``)."""
    if raw is None:
        return VisibleDevices(raw=None, order=list(range(len(uuids))))
    result = VisibleDevices(raw=raw)
    for entry in (e.strip() for e in raw.split(",")):
        if entry.startswith("MIG-") and len(entry) > 4:
            result.mig.append(entry)
            continue
        index = _match(entry, uuids)
        if index is None or index in result.order:
            result.invalid = entry
            break
        result.order.append(index)
    return result


def _match(entry: str, uuids: list[str]) -> int | None:
    if entry.isdigit():
        index = int(entry)
        return index if index < len(uuids) else None
    if entry.startswith("GPU-") and len(entry) > 4:
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None
