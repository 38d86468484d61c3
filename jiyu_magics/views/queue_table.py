"""The queue as a table (``jiyu queue``): position, run, what it waits for, since when."""

from __future__ import annotations

import time

from ..core.store.run_row import Run
from .format import NA, duration, text_table

HEADERS = ["#", "id", "name", "kind", "wants", "priority", "waiting", "notebook"]


def row(run: Run, now: float | None = None) -> list[str]:
    wants = "cpu slot" if run.gpus_requested == 0 else f"{run.gpus_requested} GPU(s)"
    if run.share and run.gpus_requested:
        wants += ", shared"
    return [
        str(run.queue_position or NA),
        run.id,
        run.name,
        str(run.kind),
        wants,
        str(run.priority),
        duration((now or time.time()) - run.created),
        run.notebook or NA,
    ]


def render_text(runs: list[Run]) -> str:
    if not runs:
        return "The queue is empty: no run is waiting for GPUs."
    now = time.time()
    return text_table(HEADERS, [row(run, now) for run in runs], right={0, 5})
