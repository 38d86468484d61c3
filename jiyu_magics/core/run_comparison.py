"""Runs side by side, as data: one record per run with its ``-p`` parameters, the training
options of its last ``fit`` call, and its final and best metrics, plus which parameters differ
between the runs. ``%runs compare`` draws it, ``jiyu_magics.runs()`` returns it for the user's
own analysis, and the panel's Compare page shows the same rows (labextension/src/comparison.ts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .events.log import read_events
from .runs.files import RunFiles
from .store.run_row import Run
from .store.run_store import RunStore

OPTIONS = ("epochs", "total_steps", "batch_size", "accum", "amp", "device", "strategy", "nproc")


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


def record(run: Run, curves: RunCurves) -> dict:
    """One row: id, name, status, the parameters, the options, final/best metrics."""
    last = lambda series: series[-1][2] if series else None  # noqa: E731
    lowest = lambda series: min(v for *_, v in series) if series else None  # noqa: E731
    return {
        "id": run.id,
        "name": run.name,
        "status": str(run.status),
        **{f"param.{k}": v for k, v in sorted(run.params.items())},
        **{k: curves.start.get(k) for k in OPTIONS if curves.start.get(k) is not None},
        "steps": curves.loss[-1][0] if curves.loss else None,
        "final_loss": last(curves.loss),
        "best_loss": lowest(curves.loss),
        "final_val_loss": last(curves.val_loss),
        "best_val_loss": lowest(curves.val_loss),
        "best_val_accuracy": max((v for *_, v in curves.val_accuracy), default=None),
        "wall_s": run.duration,
    }


def differing(records: list[dict]) -> list[str]:
    """The parameter and option columns whose values are not the same in every record."""
    columns = [c for c in dict.fromkeys(k for r in records for k in r) if c.startswith("param.") or c in OPTIONS]
    return [c for c in columns if len({repr(r.get(c)) for r in records}) > 1]


def compare(run_ids: list[str] | None = None, limit: int = 50) -> tuple[list[dict], dict[str, RunCurves]]:
    """Records and curves of the given runs (ids or unique prefixes), or of the most recent
    ``limit`` runs; raises ``UnknownRun`` for an id that matches none."""
    store = RunStore()
    runs = [store.resolve(i) for i in run_ids] if run_ids else store.list(limit=limit)
    curves = {run.id: curves_of(run.id) for run in runs}
    return [record(run, curves[run.id]) for run in runs], curves
