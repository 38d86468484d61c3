"""The final loss plot as a PNG (matplotlib), drawn by whoever shows a run's summary: the
notebook dashboard when it closes, text progress at the end of a terminal or job run, and
``jiyu plot`` on demand. The engine draws nothing.

Uses a bare ``Figure`` with the Agg canvas: no pyplot, no global figure registry, no
interaction with the notebook's inline backend, safe from any thread.
"""

from __future__ import annotations

import io

from .loss_chart import RAW, SMOOTH, VAL, wants_log
from .training_view import TrainingView


def render_loss_png(
    view: TrainingView, size: tuple[float, float] = (6.0, 3.2), dpi: int = 100, scale: str = "auto"
) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    ax = fig.subplots()
    positive = [v for _, v in view.losses if v and v > 0]
    log = bool(positive) and wants_log(min(positive), max(positive), scale)
    if view.losses:
        steps = [s for s, _ in view.losses]
        ax.plot(steps, [v for _, v in view.losses], color=RAW, lw=1, label="train")
        ax.plot(steps, view.smoothed(log=log), color=SMOOTH, lw=2, label="smoothed")
    vals = [(s, v) for s, v, _ in view.vals if v is not None]
    if vals:
        ax.plot(*zip(*vals, strict=False), "o", color=VAL, ms=4, label="val")
    if log:
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


def events_loss_png(events: list[dict]) -> bytes | None:
    """The latest fit call of an event log, drawn; None when it logged no loss."""
    view = TrainingView()
    view.feed(events)
    return render_loss_png(view) if view.losses else None
