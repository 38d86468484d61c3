"""``/jiyu/metrics``: GPUs and runs in the Prometheus text format (prometheus_client).

Built per scrape from the same GPU snapshot and run records the panel shows, so Grafana and
the sidebar never disagree. Per-run series cover the active runs and those that ended in the
last ``RECENT_S`` seconds (a scrape still sees how a run ended); older runs only count in
``jiyu_runs``, which keeps label cardinality bounded however many runs a machine has seen.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric, StateSetMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..core.run_model import RunStatus

RECENT_S = 3600.0
GPU_LABELS = ["gpu", "uuid"]
RUN_LABELS = ["run_id", "name", "kind"]

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
# (metric suffix, help, summary field)
RUN_GAUGES = [
    ("step", "Last optimizer step the run logged.", "step"),
    ("total_steps", "Steps the run plans to take.", "total_steps"),
    ("progress_ratio", "step / total_steps, 0-1.", "progress"),
    ("epoch", "Current epoch.", "epoch"),
    ("loss", "Last logged training loss.", "loss"),
    ("samples_per_second", "Training throughput.", "samples_per_s"),
    ("val_loss", "Last validation loss.", "val_loss"),
    ("val_accuracy_ratio", "Last validation accuracy, 0-1.", "val_acc"),
]


def render(gpus: dict, runs: list[dict], counts: dict[str, int], now: float | None = None) -> bytes:
    """The exposition text for one scrape."""
    families = [*gpu_families(gpus), *run_families(recent(runs, now or time.time())), runs_by_status(counts)]
    return generate_latest(_Families(families))


def content_type() -> str:
    return CONTENT_TYPE_LATEST


class _Families:
    """What ``generate_latest`` needs from a registry: something with ``collect()``."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def gpu_families(snapshot: dict) -> Iterable[Metric]:
    up = GaugeMetricFamily("jiyu_nvml_up", "1 when NVML answered and sees at least one GPU, else 0.")
    up.add_metric([], 1.0 if snapshot.get("available") else 0.0)
    yield up
    info = InfoMetricFamily("jiyu_gpu", "Static facts of each GPU.", labels=GPU_LABELS)
    devices = snapshot.get("devices") or []
    for d in devices:
        info.add_metric(_gpu_labels(d), {"name": d.get("name") or "", "driver": snapshot.get("driver_version") or "",
                                         "cuda_index": "" if d.get("visible_index") is None else str(d["visible_index"])})
    yield info
    for suffix, doc, key, scale in GPU_GAUGES:
        family = GaugeMetricFamily(f"jiyu_gpu_{suffix}", doc, labels=GPU_LABELS)
        for d in devices:
            if d.get(key) is not None:
                family.add_metric(_gpu_labels(d), float(d[key]) * scale)
        yield family


def _gpu_labels(device: dict) -> list[str]:
    return [str(device["index"]), device.get("uuid") or ""]


def recent(runs: list[dict], now: float) -> list[dict]:
    return [r for r in runs if RunStatus(r["status"]).active or (r.get("ended") or 0) >= now - RECENT_S]


def run_families(runs: list[dict]) -> Iterable[Metric]:
    status = StateSetMetricFamily("jiyu_run_status", "Status of each recent run (one state is 1).", labels=RUN_LABELS)
    duration = GaugeMetricFamily("jiyu_run_duration_seconds", "Wall time since the run started.", labels=RUN_LABELS)
    for run in runs:
        status.add_metric(_run_labels(run), {s.value: s == run["status"] for s in RunStatus})
        if run.get("duration") is not None:
            duration.add_metric(_run_labels(run), float(run["duration"]))
    yield status
    yield duration
    for suffix, doc, key in RUN_GAUGES:
        family = GaugeMetricFamily(f"jiyu_run_{suffix}", doc, labels=RUN_LABELS)
        for run in runs:
            value = (run.get("summary") or {}).get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric(_run_labels(run), float(value))
        yield family


def _run_labels(run: dict) -> list[str]:
    return [run["id"], run.get("name") or "", str(run.get("kind") or "")]


def runs_by_status(counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily("jiyu_runs", "Runs in the run store by status.", labels=["status"])
    for status in RunStatus:
        family.add_metric([status.value], float(counts.get(status, 0)))
    return family

