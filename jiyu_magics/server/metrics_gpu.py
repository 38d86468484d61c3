"""The GPU half of ``/jiyu/metrics``: each GPU's NVML readings, who holds it (leases by runs,
kernels holding memory) and the GPU-seconds the run store has accrued for it.

Names follow Prometheus' conventions (base units: bytes, seconds, watts, hertz; ``_ratio`` for
0-1; ``_total`` for counters) under ``jiyu_gpu_``, labelled ``gpu`` (NVML index) and ``uuid``.
With ``JiyuApp.metrics_gpu_names = "dcgm"`` (or ``"both"``) the readings also come under
NVIDIA dcgm-exporter's names, units and labels (``DCGM_FI_DEV_GPU_UTIL`` in percent,
``DCGM_FI_DEV_FB_USED`` in MiB; ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``),
so the widely used DCGM Grafana dashboards work unchanged.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

GPU_LABELS = ["gpu", "uuid"]
NAME_SETS = ("jiyu", "dcgm", "both")
MIB = 2**20

# (metric suffix, help, snapshot field, scale)
GPU_GAUGES = [
    ("utilization_ratio", "GPU utilisation, 0-1 (nvidia-smi utilization.gpu / 100).", "gpu_util", 0.01),
    ("memory_utilization_ratio", "Memory controller utilisation, 0-1 (utilization.memory / 100).", "mem_util", 0.01),
    ("memory_used_bytes", "Device memory in use (memory.used).", "mem_used", 1),
    ("memory_total_bytes", "Device memory in total (memory.total).", "mem_total", 1),
    ("temperature_celsius", "GPU core temperature (temperature.gpu).", "temperature", 1),
    ("power_watts", "Power draw (power.draw).", "power_draw", 1),
    ("power_limit_watts", "Enforced power limit (enforced.power.limit).", "power_limit", 1),
    ("sm_clock_hertz", "SM clock (clocks.sm).", "sm_clock", 1e6),
]
# dcgm-exporter's default counters: (name, help, value of a device dict or None)
DCGM_GAUGES = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda d: d.get("gpu_util")),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda d: d.get("mem_util")),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda d: _mib(d.get("mem_used"))),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda d: (
            _mib(d["mem_total"] - d["mem_used"])
            if d.get("mem_total") is not None and d.get("mem_used") is not None
            else None
        ),
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda d: d.get("temperature")),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda d: d.get("power_draw")),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda d: d.get("sm_clock")),
]


def gpu_families(
    snapshot: Mapping[str, Any], usage: dict[str, tuple[float, float]] | None = None, names: str = "jiyu"
) -> Iterable[Metric]:
    """``usage``: per GPU uuid, the seconds runs or kernels held it and of those, idle."""
    devices = snapshot.get("devices") or []
    up = GaugeMetricFamily("jiyu_nvml_up", "1 when NVML answered and sees at least one GPU, else 0.")
    up.add_metric([], 1.0 if snapshot.get("available") else 0.0)
    yield up
    if names in ("jiyu", "both"):
        yield from _jiyu_readings(snapshot, devices)
    if names in ("dcgm", "both"):
        yield from dcgm_families(snapshot, devices)
    yield from holder_families(devices)
    yield from usage_families(devices, usage or {})


def _jiyu_readings(snapshot: Mapping[str, Any], devices: list[dict]) -> Iterable[Metric]:
    info = InfoMetricFamily("jiyu_gpu", "Static facts of each GPU.", labels=GPU_LABELS)
    for d in devices:
        info.add_metric(
            _labels(d),
            {
                "name": d.get("name") or "",
                "driver": snapshot.get("driver_version") or "",
                "cuda_index": "" if d.get("visible_index") is None else str(d["visible_index"]),
            },
        )
    yield info
    for suffix, doc, key, scale in GPU_GAUGES:
        family = GaugeMetricFamily(f"jiyu_gpu_{suffix}", doc, labels=GPU_LABELS)
        for d in devices:
            if d.get(key) is not None:
                family.add_metric(_labels(d), float(d[key]) * scale)
        yield family


def dcgm_families(snapshot: Mapping[str, Any], devices: list[dict]) -> Iterable[Metric]:
    labels = ["gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
    host = socket.gethostname()
    for name, doc, read in DCGM_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=labels)
        for d in devices:
            value = read(d)
            if value is not None:
                family.add_metric(
                    [
                        str(d["index"]),
                        d.get("uuid") or "",
                        f"nvidia{d['index']}",
                        d.get("name") or "",
                        host,
                        snapshot.get("driver_version") or "",
                    ],
                    float(value),
                )
        yield family


def holder_families(devices: list[dict]) -> Iterable[Metric]:
    """Leases (one series per live lease: bounded by the GPUs) and whether anyone holds the GPU."""
    leases = GaugeMetricFamily("jiyu_gpu_leases", "Runs leasing the GPU now.", labels=GPU_LABELS)
    lease_info = GaugeMetricFamily(
        "jiyu_gpu_lease_info", "1 per live lease: which run holds the GPU.", labels=[*GPU_LABELS, "run_id", "run_name"]
    )
    held = GaugeMetricFamily(
        "jiyu_gpu_held", "1 when a run leases the GPU or a kernel holds memory on it.", labels=GPU_LABELS
    )
    for d in devices:
        live = d.get("leases") or []
        leases.add_metric(_labels(d), float(len(live)))
        for lease in live:
            lease_info.add_metric([*_labels(d), lease.get("run_id") or "", lease.get("run_name") or ""], 1.0)
        held.add_metric(_labels(d), 1.0 if live or _kernel_holds(d) else 0.0)
    yield from (leases, lease_info, held)


def _kernel_holds(device: dict) -> bool:
    return any(
        (p.get("owner") or {}).get("kernel_id") and (p.get("used_memory") or 0) > 0
        for p in device.get("processes") or []
    )


def usage_families(devices: list[dict], usage: dict[str, tuple[float, float]]) -> Iterable[Metric]:
    held = CounterMetricFamily(
        "jiyu_gpu_held_seconds", "GPU-seconds runs or kernels held the GPU (jiyu usage).", labels=GPU_LABELS
    )
    idle = CounterMetricFamily(
        "jiyu_gpu_held_idle_seconds", "Of those, seconds the GPU sat idle while held.", labels=GPU_LABELS
    )
    for d in devices:
        held_s, idle_s = usage.get(d.get("uuid") or "", (0.0, 0.0))
        held.add_metric(_labels(d), held_s)
        idle.add_metric(_labels(d), idle_s)
    yield from (held, idle)


def _labels(device: dict) -> list[str]:
    return [str(device["index"]), device.get("uuid") or ""]


def _mib(value: float | None) -> float | None:
    return None if value is None else value / MIB
