"""``/jiyu/metrics``: GPUs and runs in the Prometheus text format (prometheus_client).

Built per scrape from the same GPU snapshot and run records the panel shows, so Grafana and
the sidebar never disagree. GPU series: ``metrics_gpu``. Alerts and a Grafana dashboard built
on these names ship in ``images/monitoring/``. Per-run series cover the active runs and those that ended in the
last ``RECENT_S`` seconds (a scrape still sees how a run ended); older runs only count in
``jiyu_runs``, which keeps label cardinality bounded however many runs a machine has seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric, StateSetMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from .._version import __version__
from ..core.runs.model import RunStatus
from .metrics_gpu import gpu_families

RECENT_S = 3600.0
RUN_LABELS = ["run_id", "run_name", "kind"]

# (metric suffix, help, summary field)
RUN_GAUGES = [
    ("step", "Last optimizer step the run logged.", "step"),
    ("last_step_timestamp_seconds", "When the step last moved (unix time of its step event).", "step_at"),
    ("total_steps", "Steps the run plans to take.", "total_steps"),
    ("progress_ratio", "step / total_steps, 0-1.", "progress"),
    ("epoch", "Current epoch.", "epoch"),
    ("loss", "Last logged training loss.", "loss"),
    ("samples_per_second", "Training throughput.", "samples_per_s"),
    ("val_loss", "Last validation loss.", "val_loss"),
    ("val_accuracy_ratio", "Last validation accuracy, 0-1.", "val_acc"),
    ("memory_peak_bytes", "Peak CUDA memory allocated by rank 0 in this call.", "mem_peak"),
]


def render(
    gpus: Mapping[str, Any],
    runs: list[dict],
    counts: dict[str, int],
    now: float | None = None,
    usage: dict[str, tuple[float, float]] | None = None,
    gpu_names: str = "jiyu",
) -> bytes:
    """The exposition text for one scrape. ``usage``: GPU-seconds held and idle per GPU uuid;
    ``gpu_names``: jiyu, dcgm or both (``metrics_gpu``)."""
    families = [
        jiyu_info(),
        *gpu_families(gpus, usage, gpu_names),
        *run_families(recent(runs, now or time.time())),
        runs_by_status(counts),
    ]
    return generate_latest(_Families(families))


def content_type() -> str:
    return CONTENT_TYPE_LATEST


class _Families:
    """What ``generate_latest`` needs from a registry: something with ``collect()``."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def jiyu_info() -> Metric:
    info = InfoMetricFamily("jiyu", "The jiyu_magics version this server runs.")
    info.add_metric([], {"version": __version__})
    return info


def recent(runs: list[dict], now: float) -> list[dict]:
    return [r for r in runs if RunStatus(r["status"]).active or (r.get("ended") or 0) >= now - RECENT_S]


def run_families(runs: list[dict]) -> Iterable[Metric]:
    info = GaugeMetricFamily(
        "jiyu_run_info",
        "1 per recent run: its status, backend and notebook.",
        labels=[*RUN_LABELS, "status", "backend", "notebook"],
    )
    status = StateSetMetricFamily("jiyu_run_status", "Status of each recent run (one state is 1).", labels=RUN_LABELS)
    duration = GaugeMetricFamily("jiyu_run_duration_seconds", "Wall time since the run started.", labels=RUN_LABELS)
    stalled = GaugeMetricFamily(
        "jiyu_run_stalled",
        "1 while a running run's step has not moved for its stall timeout (its ranks alive), else 0.",
        labels=RUN_LABELS,
    )
    gpus = GaugeMetricFamily("jiyu_run_gpus", "GPUs the run holds now.", labels=RUN_LABELS)
    for run in runs:
        labels = _run_labels(run)
        info.add_metric([*labels, str(run["status"]), run.get("backend") or "", _notebook(run)], 1.0)
        status.add_metric(labels, {s.value: s == run["status"] for s in RunStatus})
        if run.get("duration") is not None:
            duration.add_metric(labels, float(run["duration"]))
        if run["status"] == RunStatus.RUNNING:
            stalled.add_metric(labels, 1.0 if run.get("stalled_since") is not None else 0.0)
        gpus.add_metric(labels, float(sum(g.get("ended") is None for g in run.get("gpus") or [])))
    yield from (info, status, duration, stalled, gpus)
    for suffix, doc, key in RUN_GAUGES:
        family = GaugeMetricFamily(f"jiyu_run_{suffix}", doc, labels=RUN_LABELS)
        for run in runs:
            value = (run.get("summary") or {}).get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric(_run_labels(run), float(value))
        yield family


def _notebook(run: dict) -> str:
    return os.path.basename(run.get("notebook") or "")


def _run_labels(run: dict) -> list[str]:
    return [run["id"], run.get("name") or "", str(run.get("kind") or "")]


def runs_by_status(counts: dict[str, int]) -> Metric:
    family = GaugeMetricFamily("jiyu_runs", "Runs in the run store by status.", labels=["status"])
    for status in RunStatus:
        family.add_metric([status.value], float(counts.get(status, 0)))
    return family
