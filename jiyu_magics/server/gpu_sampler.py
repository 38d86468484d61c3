"""GPU snapshots for the server, read off the event loop and shared between requests.

NVML calls block (milliseconds per device, seconds on a GPU that fell off the bus); on the
event loop they would stall every kernel's websocket. Reads run on one dedicated thread, so
NVML is never entered twice at once, and a snapshot younger than ``max_age`` is reused: ten
open panels and a Prometheus scraper cost one NVML read per interval, not one per request.

Each read also says who holds what (``core.gpu.status``: leases, and processes mapped to runs
and to the server's kernels) and lists the kernels holding GPU memory with their idle time. The
server's background sample also credits GPU and idle GPU time to the holders
(``core.gpu.usage``): the server samples NVML already, so nothing else polls for it, and a
request (a panel poll, a scrape) writes nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypedDict

from ..core.gpu import doctor
from ..core.gpu import snapshot as gpu
from ..core.gpu.doctor import FindingJson
from ..core.gpu.owners import KernelInfo, busy_threshold
from ..core.gpu.snapshot import GpuDeviceJson, GpuSnapshotJson
from ..core.gpu.status import owned_snapshot
from ..core.gpu.usage import accrue
from ..core.store.database import StoreUnusable
from ..core.store.run_store import RunStore


class GpuKernel(TypedDict):
    """A kernel holding GPU memory, across GPUs."""

    kernel_id: str
    session_id: str | None
    notebook: str | None
    execution_state: str | None
    idle_s: float | None  # seconds since its last activity
    run_id: str | None  # the run it is running (an in-kernel %%train), if any
    memory: int  # bytes its processes hold, on every GPU together
    gpus: list[int]  # the GPUs' indices
    idle_warning: bool  # it holds memory and has been idle for the warning's time or longer


class GpuStatus(GpuSnapshotJson):
    """``GET /jiyu/api/gpus``: the snapshot with owners, and what the panel shows beside it."""

    doctor: FindingJson | None  # the doctor's first finding, when no GPU is visible
    kernels: list[GpuKernel]  # the kernels holding GPU memory, most memory first
    busy_threshold: int  # bytes of foreign memory above which a GPU is busy
    idle_warning_s: float  # seconds a kernel may hold GPU memory idle before the panel warns


@dataclass
class Holders:
    """What a read needs to name owners: the run store, the kernels the server knows (by
    pid), a reader of what runs report, and when an idle kernel earns a warning."""

    store: RunStore | None = None
    kernels: Mapping[int, KernelInfo] | None = None
    reported: Callable[[str], int | None] | None = None
    idle_warning_s: float = 1800.0
    accrue: bool = False  # credit GPU time to the holders: the background sampler's read only


def read_gpus(
    first_finding: Callable[[], FindingJson | None] | None = None, holders: Holders | None = None
) -> GpuStatus:
    """The ``%gpu_status`` snapshot as data with owners, the kernels holding GPU memory, plus
    the doctor's first finding when no GPU is visible (the panel shows why, not just that)."""
    holders = holders or Holders()
    snap = owned_snapshot(holders.store, holders.kernels, holders.reported, snap=gpu.snapshot())
    if holders.accrue and snap.available and snap.owners_note is None:
        try:
            accrue((holders.store or RunStore()).db, snap)
        except StoreUnusable:
            pass
    data: GpuSnapshotJson = snap.to_dict()
    return GpuStatus(
        **data,
        doctor=None if snap.available else (first_finding or doctor_finding)(),
        kernels=kernels_on_gpus(data["devices"], holders.idle_warning_s),
        busy_threshold=busy_threshold(),
        idle_warning_s=holders.idle_warning_s,
    )


def kernels_on_gpus(devices: list[GpuDeviceJson], idle_warning_s: float) -> list[GpuKernel]:
    """Each kernel that holds GPU memory: where, how much, how long idle, and whether that is
    long enough to warn about (memory held by a kernel nobody uses blocks everyone else)."""
    found: dict[str, GpuKernel] = {}
    for device in devices:
        for proc in device["processes"]:
            owner = proc["owner"]
            if owner is None or not owner["kernel_id"]:
                continue
            entry = found.setdefault(
                owner["kernel_id"],
                GpuKernel(
                    kernel_id=owner["kernel_id"],
                    session_id=owner["session_id"],
                    notebook=owner["notebook"],
                    execution_state=owner["execution_state"],
                    idle_s=owner["idle_s"],
                    run_id=owner["run_id"],
                    memory=0,
                    gpus=[],
                    idle_warning=False,
                ),
            )
            entry["memory"] += proc["used_memory"] or 0
            if device["index"] not in entry["gpus"]:
                entry["gpus"].append(device["index"])
    for entry in found.values():
        idle = entry["idle_s"]
        entry["idle_warning"] = bool(entry["memory"]) and idle is not None and idle >= idle_warning_s
    return sorted(found.values(), key=lambda k: -k["memory"])


def doctor_finding() -> FindingJson | None:
    finding = doctor.first_problem(doctor.diagnose())
    return finding.to_dict() if finding else None


def once(compute: Callable[[], FindingJson | None]) -> Callable[[], FindingJson | None]:
    """The doctor's answer does not change while the server runs (no driver appears under a
    running server); at the panel's refresh rate it would rescan packages every 2 s."""
    cache: list = []

    def cached():
        if not cache:
            cache.append(compute())
        return cache[0]

    return cached


class GpuSampler:
    def __init__(
        self,
        max_age: float,
        read: Callable[[Holders], GpuStatus] | None = None,
        holders: Callable[[], Holders] | None = None,
    ):
        self.max_age = max_age
        finding = once(doctor_finding)
        self._read = read or (lambda found: read_gpus(finding, found))
        self._holders = holders or Holders
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jiyu-nvml")
        self._lock = asyncio.Lock()
        self._latest: GpuStatus | None = None
        self._taken = float("-inf")

    async def snapshot(self, kernels: Mapping[int, KernelInfo] | None = None, accrue: bool = False) -> GpuStatus:
        """The latest snapshot; a new one (owners named with ``kernels``) when it is stale.
        ``accrue``: a new one whatever its age, crediting GPU time (``core.gpu.usage``): the
        server's background sample, so that no request writes."""
        async with self._lock:
            latest = self._latest
            if accrue or latest is None or time.monotonic() - self._taken >= self.max_age:
                loop = asyncio.get_running_loop()
                found = replace(self._holders(), kernels=kernels, accrue=accrue)
                fresh: GpuStatus = await loop.run_in_executor(self._executor, self._read, found)
                latest, self._latest, self._taken = fresh, fresh, time.monotonic()
            return latest

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
