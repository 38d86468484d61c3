"""Runs side by side, as data: one record per run with what a tracker records of its last
``fit`` call, grouped by the column's prefix: ``param.`` its parameters (the notebook's
``parameters`` cell, ``-p`` values), ``model.`` (class, parameter count), ``optimizer.`` (class,
hyperparameters per parameter group, scheduler), ``data.`` (batch size, steps per epoch,
processes) and ``option.`` (every ``fit`` option), then its final and best metrics; plus which
columns differ between the runs. ``%runs compare`` and ``jiyu compare`` draw it,
``jiyu_magics.runs()`` returns it for the user's own analysis, and the panel's Compare page
shows the same rows (labextension/src/comparison.ts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .events.log import read_events
from .events.tracked import tracked
from .runs.files import RunFiles
from .store.run_row import Run
from .store.run_store import RunStore

GROUPS: tuple[tuple[str, str], ...] = (
    ("parameters", "param."),
    ("model", "model."),
    ("optimizer", "optimizer."),
    ("data", "data."),
    ("fit options", "option."),
)
# options every run has and nobody compares: shown with the rows that are the same everywhere
INTERNAL_OPTIONS = frozenset(
    {"keep_ckpts", "log_interval_s", "log_every", "ckpt_every", "ckpt_dir", "save_ckpts", "stall_timeout"}
    | {"fast_data", "name", "resume", "val_every", "scheduler_interval"}
)


@dataclass
class RunCurves:
    """A run's training and validation loss by step and by seconds since its first event."""

    loss: list[tuple[int, float, float]] = field(default_factory=list)  # (step, seconds, loss)
    val_loss: list[tuple[int, float, float]] = field(default_factory=list)
    val_accuracy: list[tuple[int, float, float]] = field(default_factory=list)
    start: dict = field(default_factory=dict)


def curves_of(run_id: str) -> RunCurves:
    events, _ = read_events(RunFiles.of(run_id).events)
    curves, t0 = RunCurves(), None
    for event in events:
        t0 = event.get("t", 0.0) if t0 is None else t0
        at = (event.get("step"), event.get("t", 0.0) - t0)
        if event["kind"] == "start":
            curves.start = event
        elif event["kind"] == "step" and _finite(event.get("loss")) and at[0] is not None:
            curves.loss.append((*at, event["loss"]))
        elif event["kind"] == "val" and at[0] is not None:
            for series, key in ((curves.val_loss, "loss"), (curves.val_accuracy, "accuracy")):
                if _finite(event.get(key)):
                    series.append((*at, event[key]))
    return curves


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def group_of(column: str) -> str:
    return next((name for name, prefix in GROUPS if column.startswith(prefix)), "metrics")


def is_internal(column: str) -> bool:
    return column.startswith("option.") and column.split(".", 1)[1] in INTERNAL_OPTIONS


def record(run: Run, curves: RunCurves) -> dict:
    """One row: id, name, status, what the tracker recorded (``tracked``), final/best metrics."""
    last = lambda series: series[-1][2] if series else None  # noqa: E731
    lowest = lambda series: min(v for *_, v in series) if series else None  # noqa: E731
    return {
        "id": run.id,
        "name": run.name,
        "status": str(run.status),
        **tracked(curves.start, run.params),
        "steps": curves.loss[-1][0] if curves.loss else None,
        "final_loss": last(curves.loss),
        "best_loss": lowest(curves.loss),
        "final_val_loss": last(curves.val_loss),
        "best_val_loss": lowest(curves.val_loss),
        "best_val_accuracy": max((v for *_, v in curves.val_accuracy), default=None),
        "wall_s": run.duration,
    }


def differing(records: list[dict]) -> list[str]:
    """The tracked columns (all but the metrics) whose values are not the same in every record."""
    columns = [c for c in dict.fromkeys(k for r in records for k in r) if group_of(c) != "metrics"]
    return [c for c in columns if len({repr(r.get(c)) for r in records}) > 1]


def compare(run_ids: list[str] | None = None, limit: int = 50) -> tuple[list[dict], dict[str, RunCurves]]:
    """Records and curves of the given runs (ids or unique prefixes), or of the most recent
    ``limit`` runs; raises ``UnknownRun`` for an id that matches none."""
    store = RunStore()
    runs = [store.resolve(i) for i in run_ids] if run_ids else store.list(limit=limit)
    curves = {run.id: curves_of(run.id) for run in runs}
    return [record(run, curves[run.id]) for run in runs], curves
