"""GPU snapshots read through NVML (the ``pynvml`` module of nvidia-ml-py).

NVML, not torch: it needs no CUDA context (no 500 MB taken from the user's GPU, no breaking of
fork-based launchers) and sees every process on the device. NVML is initialised on the first
snapshot, never at import, so a host without a driver gets a one-line answer instead of the
import-time crash of other dashboards. Each field a device does not support is ``None`` (shown
as "n/a"), never an exception. Field comments name the ``nvidia-smi --query-gpu`` equivalent.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from ..processes.info import ancestors, command_line
from ..settings import Settings
from ..store.run_row import RunGpu
from .torch_versions import torch_facts
from .visible_devices import VisibleDevices, parse_visible_devices

MINE_DEPTH = 4  # how far up a GPU process's parents this process is looked for ("mine")
_init_lock = threading.Lock()
_initialised: set[int] = set()  # ids of NVML modules this process has initialised


OwnerKind = Literal["run", "kernel", "other", "outside", "user"]


class ProcessOwnerJson(TypedDict):
    """Who a GPU process belongs to (``owners.ProcessOwner`` as data): a run, a kernel, another
    Unix user (``user``: only who, never what), someone else, or a pid outside this container."""

    kind: OwnerKind
    label: str  # one line for people
    run_id: str | None
    run_name: str | None
    run_kind: str | None
    notebook: str | None
    kernel_id: str | None
    session_id: str | None
    execution_state: str | None
    idle_s: float | None
    user: str | None


class GpuLease(RunGpu):
    """A run's lease on a GPU with what views show of the run (``owners.Attribution``); another
    user's (on a shared box) carries only the user, the run's kind and the time."""

    run_name: str | None
    run_kind: str | None
    notebook: str | None
    reported_memory: int | None  # bytes of GPU memory the run itself reports (torch's peak)
    user: str | None  # on a shared box: the Unix user whose lease it is
    mine: bool  # False for another user's lease


class GpuProcessJson(TypedDict):
    """A process NVML lists on a GPU, with its owner once attributed."""

    pid: int
    used_memory: int | None
    command: str | None
    type: str
    mine: bool
    owner: ProcessOwnerJson | None


class GpuDeviceJson(TypedDict):
    """One GPU's readings (``None``: not supported), its processes, its leases and whether it is free."""

    index: int
    visible_index: int | None
    name: str | None
    uuid: str | None
    gpu_util: int | None
    mem_util: int | None
    mem_used: int | None
    mem_total: int | None
    mem_reserved: int | None
    temperature: int | None
    power_draw: float | None
    power_limit: float | None
    sm_clock: int | None
    mig_mode: bool | None
    processes: list[GpuProcessJson]
    leases: list[GpuLease]
    foreign_memory: int | None
    free: bool | None


class GpuSnapshotJson(TypedDict):
    """A snapshot as data (``%gpu_status --json``, ``jiyu gpu --json``, the REST API's
    ``GpuStatus``), field by field as the dataclasses below hold them."""

    available: bool
    reason: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    visible_devices: str | None
    devices: list[GpuDeviceJson]
    torch: dict | None
    time: float
    owners_note: str | None


@dataclass
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes
    command: str | None
    type: str  # "compute" or "graphics"
    mine: bool = False  # this process or one of its children
    owner: ProcessOwnerJson | None = None  # who it belongs to (``owners.ProcessOwner``), once attributed

    def to_dict(self) -> GpuProcessJson:
        return GpuProcessJson(
            pid=self.pid,
            used_memory=self.used_memory,
            command=self.command,
            type=self.type,
            mine=self.mine,
            owner=self.owner,
        )


@dataclass
class GpuDevice:
    index: int
    visible_index: int | None  # cuda:N under CUDA_VISIBLE_DEVICES; None when hidden
    name: str | None  # name
    uuid: str | None  # uuid
    gpu_util: int | None = None  # utilization.gpu (%)
    mem_util: int | None = None  # utilization.memory (%)
    mem_used: int | None = None  # memory.used (bytes; the driver's reserved memory not included)
    mem_total: int | None = None  # memory.total (bytes)
    mem_reserved: int | None = None  # memory.reserved (bytes; None where the driver reports no v2 info)
    temperature: int | None = None  # temperature.gpu (C)
    power_draw: float | None = None  # power.draw (W)
    power_limit: float | None = None  # enforced.power.limit (W)
    sm_clock: int | None = None  # clocks.sm (MHz)
    mig_mode: bool | None = None  # mig.mode.current
    processes: list[GpuProcess] = field(default_factory=list)
    # filled in by ``gpu_owners.attribute`` (None/empty until then):
    leases: list[GpuLease] = field(default_factory=list)  # the runs leasing it: run, name, kind, notebook, since
    foreign_memory: int | None = None  # bytes held by processes that none of its leases accounts for
    free: bool | None = None  # no lease, and foreign memory within the threshold

    @property
    def mem_fraction(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return self.mem_used / self.mem_total

    def to_dict(self) -> GpuDeviceJson:
        return GpuDeviceJson(
            index=self.index,
            visible_index=self.visible_index,
            name=self.name,
            uuid=self.uuid,
            gpu_util=self.gpu_util,
            mem_util=self.mem_util,
            mem_used=self.mem_used,
            mem_total=self.mem_total,
            mem_reserved=self.mem_reserved,
            temperature=self.temperature,
            power_draw=self.power_draw,
            power_limit=self.power_limit,
            sm_clock=self.sm_clock,
            mig_mode=self.mig_mode,
            processes=[p.to_dict() for p in self.processes],
            leases=self.leases,
            foreign_memory=self.foreign_memory,
            free=self.free,
        )


@dataclass
class GpuSnapshot:
    available: bool
    reason: str | None = None  # why no GPU is visible
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as set
    devices: list[GpuDevice] = field(default_factory=list)
    torch: dict | None = None  # versions, only when torch is already imported
    time: float = 0.0
    owners_note: str | None = None  # why leases and owners are missing (an unreadable run store)

    def to_dict(self) -> GpuSnapshotJson:
        """As plain data (flat copies, field by field: ``asdict``'s deep recursion costs more
        than the NVML read on a box with many processes)."""
        return GpuSnapshotJson(
            available=self.available,
            reason=self.reason,
            driver_version=self.driver_version,
            cuda_driver_version=self.cuda_driver_version,
            visible_devices=self.visible_devices,
            devices=[d.to_dict() for d in self.devices],
            torch=self.torch,
            time=self.time,
            owners_note=self.owners_note,
        )


def load_nvml() -> Any:
    """The ``pynvml`` module. Imported here, never at module import."""
    return importlib.import_module("pynvml")


def init_nvml(nvml: Any) -> None:
    """``nvmlInit`` once per process (it is reference counted; we keep our reference)."""
    with _init_lock:
        if id(nvml) not in _initialised:
            nvml.nvmlInit()
            _initialised.add(id(nvml))


def nvml_failure(error: BaseException) -> str:
    """A human reason for an NVML start-up failure."""
    text = str(error) or type(error).__name__
    name = type(error).__name__
    if "LibraryNotFound" in name or "Library Not Found" in text:
        return "the NVIDIA driver's NVML library is not installed or not mounted into this container"
    if "DriverNotLoaded" in name or "Driver Not Loaded" in text:
        return "the NVIDIA kernel driver is not loaded"
    if "NoPermission" in name:
        return "no permission to open the NVIDIA device files"
    return f"NVML failed to start ({text})"


def snapshot(nvml: Any = None, env: Mapping[str, str] | None = None, own_pid: int | None = None) -> GpuSnapshot:
    """Everything ``%gpu_status`` shows, as data."""
    visible_devices = Settings.from_environ(env).visible_devices
    taken = time.time()
    facts = torch_facts() if _torch_imported() else None
    torch_info = facts.to_dict() if facts else None
    try:
        nvml = nvml or load_nvml()
    except ImportError as error:
        return GpuSnapshot(False, f"nvidia-ml-py is not installed ({error})", torch=torch_info, time=taken)
    try:
        init_nvml(nvml)
        count = nvml.nvmlDeviceGetCount()
    except Exception as error:  # pynvml.NVMLError and its many subclasses
        return GpuSnapshot(False, nvml_failure(error), torch=torch_info, time=taken)
    handles = device_handles(nvml, count)  # a lost GPU's handle is None: its fields read as n/a
    uuids = [nvml_value(nvml.nvmlDeviceGetUUID, h) or "" for h in handles]
    visible = parse_visible_devices(visible_devices, uuids)
    devices = [_device(nvml, i, h, uuids[i], visible, own_pid or os.getpid()) for i, h in enumerate(handles)]
    cuda = nvml_value(nvml.nvmlSystemGetCudaDriverVersion)
    return GpuSnapshot(
        available=count > 0,
        reason=None if count else "NVML reports no NVIDIA GPU on this machine",
        driver_version=nvml_value(nvml.nvmlSystemGetDriverVersion),
        cuda_driver_version=cuda_version_string(cuda),
        visible_devices=visible.raw,
        devices=devices,
        torch=torch_info,
        time=taken,
    )


def device_handles(nvml: Any, count: int) -> list[Any]:
    return [nvml_value(nvml.nvmlDeviceGetHandleByIndex, i) for i in range(count)]


def utilization(visible_index: int, env: Mapping[str, str] | None = None) -> int | None:
    """GPU utilisation (%) of ``cuda:N`` alone, for a dashboard polling while training: a
    few NVML calls, no process table, and ``None`` rather than an exception on any failure."""
    try:
        nvml = load_nvml()
        init_nvml(nvml)
        handles = device_handles(nvml, nvml.nvmlDeviceGetCount())
        uuids = [nvml_value(nvml.nvmlDeviceGetUUID, h) or "" for h in handles]
        raw = Settings.from_environ(env).visible_devices
        physical = parse_visible_devices(raw, uuids).order[visible_index]
        return int(nvml.nvmlDeviceGetUtilizationRates(handles[physical]).gpu)
    except Exception:
        return None


def cuda_version_string(number: int | None) -> str | None:
    """NVML's 12040 as "12.4"."""
    if not number:
        return None
    return f"{number // 1000}.{(number % 1000) // 10}"


def _torch_imported() -> bool:
    import sys

    return "torch" in sys.modules


def nvml_value(fn: Callable, *args: Any) -> Any:
    """One NVML query; ``None`` when the device does not support it."""
    try:
        value = fn(*args)
    except Exception:  # NVMLError_NotSupported, _NoPermission, _GpuIsLost, ...
        return None
    return value.decode() if isinstance(value, bytes) else value


def _device(nvml: Any, index: int, handle: Any, uuid: str, visible: VisibleDevices, mine: int) -> GpuDevice:
    util = nvml_value(nvml.nvmlDeviceGetUtilizationRates, handle)
    memory = memory_info(nvml, handle)
    power = nvml_value(nvml.nvmlDeviceGetPowerUsage, handle)
    limit = nvml_value(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    mig = nvml_value(nvml.nvmlDeviceGetMigMode, handle)
    return GpuDevice(
        index=index,
        visible_index=visible.visible_index(index),
        name=nvml_value(nvml.nvmlDeviceGetName, handle),
        uuid=uuid or None,
        gpu_util=getattr(util, "gpu", None),
        mem_util=getattr(util, "memory", None),
        mem_used=getattr(memory, "used", None),
        mem_total=getattr(memory, "total", None),
        mem_reserved=getattr(memory, "reserved", None),
        temperature=nvml_value(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        power_draw=None if power is None else power / 1000.0,
        power_limit=None if limit is None else limit / 1000.0,
        sm_clock=nvml_value(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        mig_mode=None if mig is None else bool(mig[0]),
        processes=_processes(nvml, handle, mine),
    )


def memory_info(nvml: Any, handle: Any) -> Any:
    """NVML's v2 memory info where the driver has it, as ``nvidia-smi`` reads it: its ``used``
    leaves out the memory the driver reserves (about 600 MiB on an idle H200), which v1 counts
    as used. Older drivers (or nvidia-ml-py) without v2 answer v1."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    info = nvml_value(nvml.nvmlDeviceGetMemoryInfo, handle, version) if version is not None else None
    return info if info is not None else nvml_value(nvml.nvmlDeviceGetMemoryInfo, handle)


def _processes(nvml: Any, handle: Any, own: int) -> list[GpuProcess]:
    found: dict[int, GpuProcess] = {}
    for kind, query in (
        ("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
        ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses),
    ):
        for proc in nvml_value(query, handle) or []:
            if proc.pid in found:
                continue
            used = getattr(proc, "usedGpuMemory", None)
            found[proc.pid] = GpuProcess(
                pid=proc.pid,
                used_memory=used if isinstance(used, int) else None,
                command=command_line(proc.pid),
                type=kind,
                mine=own in ancestors(proc.pid, MINE_DEPTH),
            )
    return list(found.values())
