"""The loss plot of a finished run, drawn by the monitor that shows its summary.

The engine draws nothing (a PNG costs a matplotlib import and ~50 ms inside the timed call);
the notebook dashboard and text progress draw it when they close, from the events they were
fed, and leave it in the run folder as ``loss.png`` for notebooks reopened without a kernel
and for anyone who looks in the folder.
"""

from __future__ import annotations

from ..core.runs.files import RunFiles
from ..views.loss_plot import render_loss_png
from ..views.training_view import TrainingView


def summary_png(view: TrainingView, scale: str = "auto") -> bytes | None:
    """The view's loss curve as a PNG (None before any loss), also kept as the run's
    ``loss.png``; a run folder that cannot be written costs the copy, never the summary."""
    if not view.losses:
        return None
    png = render_loss_png(view, scale=scale)
    if view.run_id:
        try:
            RunFiles.of(view.run_id).write_loss_plot(png)
        except OSError:
            pass
    return png
