"""GPU snapshots for the server, read off the event loop and shared between requests.

NVML calls block (milliseconds per device, seconds on a GPU that fell off the bus); on the
event loop they would stall every kernel's websocket. Reads run on one dedicated thread, so
NVML is never entered twice at once, and a snapshot younger than ``max_age`` is reused: ten
open panels and a Prometheus scraper cost one NVML read per interval, not one per request.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..core import cuda_doctor as doctor, gpu_snapshot as gpu


def read_gpus(first_finding: Callable[[], dict | None] | None = None) -> dict:
    """The ``%gpu_status`` snapshot as data, plus the doctor's first finding when no GPU is
    visible (the panel shows why, not just that)."""
    snap = gpu.snapshot()
    data = snap.to_dict()
    data["doctor"] = None if snap.available else (first_finding or doctor_finding)()
    return data


def doctor_finding() -> dict | None:
    finding = doctor.first_problem(doctor.diagnose())
    return finding.to_dict() if finding else None


def once(compute: Callable[[], dict | None]) -> Callable[[], dict | None]:
    """The doctor's answer does not change while the server runs (no driver appears under a
    running server); at the panel's refresh rate it would rescan packages every 2 s."""
    cache: list = []

    def cached():
        if not cache:
            cache.append(compute())
        return cache[0]

    return cached


class GpuSampler:
    def __init__(self, max_age: float, read: Callable[[], dict] | None = None):
        self.max_age = max_age
        finding = once(doctor_finding)
        self._read = read or (lambda: read_gpus(finding))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jiyu-nvml")
        self._lock = asyncio.Lock()
        self._latest: dict | None = None
        self._taken = float("-inf")

    async def snapshot(self) -> dict:
        async with self._lock:
            if self._latest is None or time.monotonic() - self._taken >= self.max_age:
                loop = asyncio.get_running_loop()
                self._latest = await loop.run_in_executor(self._executor, self._read)
                self._taken = time.monotonic()
            return self._latest

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
