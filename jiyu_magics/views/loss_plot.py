"""The final loss plot as a PNG (matplotlib, drawn once at the end of a run).

Uses a bare ``Figure`` with the Agg canvas: no pyplot, no global figure registry, no
interaction with the notebook's inline backend, safe from any thread.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

from ..core.event_log import read_events
from .loss_chart import RAW, SMOOTH, VAL, wants_log
from .training_view import TrainingView


def render_loss_png(view: TrainingView, size: tuple[float, float] = (6.0, 3.2), dpi: int = 100) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    ax = fig.subplots()
    if view.losses:
        steps = [s for s, _ in view.losses]
        ax.plot(steps, [v for _, v in view.losses], color=RAW, lw=1, label="train")
        ax.plot(steps, view.smoothed(), color=SMOOTH, lw=2, label="smoothed")
    vals = [(s, v) for s, v, _ in view.vals if v is not None]
    if vals:
        ax.plot(*zip(*vals), "o", color=VAL, ms=4, label="val")
    positive = [v for _, v in view.losses if v and v > 0]
    if positive and wants_log(min(positive), max(positive)):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"{view.name or ''} · {view.status_text}", fontsize=9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def save_loss_plot(events_path: Path | str, png_path: Path | str) -> Path:
    """Draws the latest fit call of an event log into ``png_path`` (atomically replaced)."""
    view = TrainingView()
    view.feed(read_events(events_path)[0])
    png_path = Path(png_path)
    temp = png_path.with_name(f".{png_path.name}.tmp-{os.getpid()}")
    temp.write_bytes(render_loss_png(view))
    os.replace(temp, png_path)
    return png_path
