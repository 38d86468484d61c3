"""``jiyu usage`` as a table: GPU-hours and idle GPU-hours per run, notebook or day."""

from __future__ import annotations

import time

from .format import text_table

HEADERS = {"run": "run", "notebook": "notebook", "day": "day", "user": "user"}


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f}"


def render_text(rows: list, by: str, since: float) -> str:
    start = time.strftime("%Y-%m-%d %H:%M", time.localtime(since))
    if not rows:
        return f"No GPU time recorded since {start}."
    table = [[row.label, hours(row.gpu_s), hours(row.idle_s), _share(row), str(row.runs)] for row in rows]
    total_gpu, total_idle = sum(r.gpu_s for r in rows), sum(r.idle_s for r in rows)
    table.append(["total", hours(total_gpu), hours(total_idle), _share_of(total_idle, total_gpu), ""])
    heading = f"GPU time since {start}, by {by}:"
    return (
        heading
        + "\n"
        + text_table([HEADERS[by], "GPU-hours", "idle GPU-hours", "idle", "runs"], table, right={1, 2, 3, 4})
    )


def _share(row) -> str:
    return _share_of(row.idle_s, row.gpu_s)


def _share_of(idle: float, held: float) -> str:
    return f"{100 * idle / held:.0f}%" if held else "-"
