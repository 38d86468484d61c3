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


def render_text(runs: list[Run], others: list[dict] | None = None) -> str:
    """Your waiting runs; on a shared box every user's, in one order: another user's say only
    the user, the kind, what it wants and since when."""
    if not runs and not others:
        return "The queue is empty: no run is waiting for GPUs."
    now = time.time()
    if not others:
        return text_table(HEADERS, [row(run, now) for run in runs], right={0, 5})
    rows = [(run.queue_position or 0, ["you", *row(run, now)]) for run in runs]
    rows += [(w["queue_position"], [w["user"], *other_row(w, now)]) for w in others]
    rows.sort(key=lambda item: item[0] or 10**9)
    return text_table(["user", *HEADERS], [r for _, r in rows], right={1, 6})


def other_row(waiting: dict, now: float) -> list[str]:
    """Another user's waiting run: its place, id, kind, GPUs and wait; no name, no notebook."""
    return [
        str(waiting["queue_position"] or NA),
        waiting["id"],
        NA,
        waiting["kind"],
        f"{waiting['gpus_requested']} GPU(s)",
        NA,
        duration(now - waiting["created"]),
        NA,
    ]
