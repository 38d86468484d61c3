"""The live training dashboard: one persistent widget in the cell, refreshed by wall clock.

It draws a :class:`~jiyu_magics.views.training_view.TrainingView` fed with event dicts, either
directly by the engine in this kernel or by :func:`~jiyu_magics.widgets.event_follow.follow`
tailing another process's ``events.jsonl`` (``%job attach``, ``%%train --nproc``): one
rendering path for both. Each refresh sends only the widget values that changed, in one
``hold_sync`` batch per widget; the loss curve is an SVG string the browser draws. When the
run ends the output is replaced, in place, by a static summary with the loss PNG (drawn here,
from the events: the engine draws nothing), so a saved or exported notebook shows the result
without a kernel or widget state.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

import ipywidgets as widgets
from IPython.display import display

from ..core.events.log import read_events
from ..core.gpu import snapshot as gpu
from ..core.runs.model import RunStatus
from ..views.format import duration, na
from ..views.loss_chart import loss_svg
from ..views.train_text import header_text, stat_rows, steps_text, summary_html, summary_text, tracking_lines
from ..views.training_view import TrainingView
from .comm_pump import CommPump
from .event_follow import follow
from .summary_plot import summary_png

if TYPE_CHECKING:  # the dashboard itself never imports torch: %job attach uses it without training
    from ..train.stop_signal import StopSignal

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
DEFAULT_REFRESH_S = 1.0
MAX_RENDER_SHARE = 0.01  # a slow front-end link stretches the interval to keep rendering under 1%
GPU_EVERY_S = 5.0
CLOCK_S = 1.0  # the elapsed time is redrawn this often while no event comes
TRACKING_EVERY_S = 2.0  # where --track sent the run: looked up this often until its followers said
# What a front-end without ipywidgets shows while training (the summary replaces it at the end),
# and what a notebook saved mid-run keeps: the way to progress such a front-end can show.
FALLBACK_TEXT = (
    "Training dashboard (needs a widget-capable front-end; run %env JIYU_UI=text before training for text progress)"
)
BAR_STYLES: dict[RunStatus | None, str] = {
    RunStatus.SUCCEEDED: "success",
    RunStatus.FAILED: "danger",
    RunStatus.STOPPED: "warning",
}


class TrainingDashboard:
    def __init__(
        self,
        refresh: float = DEFAULT_REFRESH_S,
        stop: StopSignal | None = None,
        on_stop: Callable[[], None] | None = None,
        scale: str = "auto",
    ):
        self.refresh = refresh
        self.scale = scale  # the loss chart's y axis: auto (log past a 30x span) | log | linear
        self.interval = refresh
        self.stop = stop
        self.on_stop = on_stop
        self.view = TrainingView()
        self.pump = CommPump()
        self.renders = 0
        self.busy_s = 0.0  # time spent in feed() and poll(): the dashboard's whole cost to training
        self.offset = 0  # how far an event log was read (follow mode)
        self._drawn_version = -1
        self._gpu_checked = 0.0
        self._clock_drawn = 0.0  # when the progress label's elapsed time was last drawn
        self._tracking_checked = 0.0
        self.widget: widgets.VBox | None = None  # built with the first render: a call rejected early opens no widget
        self.handle = None
        self._show_pending = False

    def _built(self) -> widgets.VBox:
        if self.widget is None:
            self.widget = self._build()
        return self.widget

    def _build(self) -> widgets.VBox:
        self.header = widgets.HTML()
        self.stop_button = widgets.Button(
            description="Stop",
            icon="stop",
            button_style="warning",
            tooltip="Stop at the next step and save a checkpoint",
            # a fixed size: in a narrow output the header wraps under it, the button keeps its word
            layout=widgets.Layout(width="90px", min_width="90px", flex="0 0 auto"),
        )
        self.stop_button.on_click(self._clicked)
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="50%"))
        self.progress_label = widgets.Label()
        self.chart = widgets.HTML(loss_svg(self.view, scale=self.scale))
        self.stats = widgets.HTML()
        self.notes = widgets.HTML()
        return widgets.VBox(
            [
                widgets.HBox(
                    [self.stop_button, self.header], layout=widgets.Layout(align_items="center", flex_flow="row wrap")
                ),
                widgets.HBox([self.progress, self.progress_label], layout=widgets.Layout(align_items="center")),
                # wraps: in a narrow output (the panel's log beside the notebook) the numbers go under the chart
                widgets.HBox([self.chart, self.stats], layout=widgets.Layout(flex_flow="row wrap")),
                self.notes,
            ]
        )

    # -- the monitor interface the engine and follow() call ---------------------------------
    def show(self) -> TrainingDashboard:
        """Puts the dashboard in the cell output once it has a run to show: a call rejected
        before training starts leaves no empty widget behind."""
        self._show_pending = True
        if self.view.version:
            self._display()
        return self

    def _display(self) -> None:
        self._show_pending = False
        self.render()
        bundle = self._built()._repr_mimebundle_()
        bundle["text/plain"] = FALLBACK_TEXT
        self.handle = display(bundle, raw=True, display_id=True)

    def feed(self, events: list[dict]) -> None:
        started = time.perf_counter()
        self.view.feed(events)
        if self._show_pending and self.view.version:
            self._display()
        self.busy_s += time.perf_counter() - started

    def poll(self) -> None:
        """Handles pending clicks, then redraws if anything changed since the last redraw."""
        started = time.perf_counter()
        self.pump()
        self._look_up_tracking()
        if self.view.version != self._drawn_version or self._gpu_due():
            self._sample_gpu()
            self.render()
        elif self.widget is not None and not self.view.finished and time.monotonic() - self._clock_drawn >= CLOCK_S:
            self._set_progress_text()  # no event (a stall): the elapsed time still moves
        spent = time.perf_counter() - started
        self.busy_s += spent
        self.interval = max(self.refresh, spent / MAX_RENDER_SHARE)

    def render(self) -> None:
        self._built()
        view = self.view
        self._drawn_version = view.version
        self.renders += 1
        self._set(self.header, "value", f"<b>{view.status_text}</b> · {escape(header_text(view))}")
        self._set(self.progress, "value", view.progress or 0.0)
        self._set(self.progress, "bar_style", BAR_STYLES.get(view.status, ""))
        self._set_progress_text()
        self._set(self.chart, "value", loss_svg(view, scale=self.scale))
        self._set(self.stats, "value", _stats_table(view))
        self._set(self.notes, "value", _notes(view))
        if view.finished and not self.stop_button.disabled:
            self.stop_button.disabled = True

    def close(self) -> None:
        """The final refresh, then the static summary in place of the widget."""
        if self.widget is None:
            return  # never shown: the call was rejected before training started
        self._look_up_tracking(force=True)
        self.render()
        if self.handle is None:
            return
        png = summary_png(self.view, self.scale)
        # the themed SVG for the live notebook; the PNG stays in the bundle for saved/exported copies
        bundle = {
            "text/html": summary_html(self.view, svg=loss_svg(self.view, scale=self.scale)),
            "text/plain": summary_text(self.view),
        }
        if png:
            bundle["image/png"] = base64.b64encode(png).decode()
        self.handle.update(bundle, raw=True)

    # -- tailing another process's run --------------------------------------------------------
    @classmethod
    def from_events(cls, path: Path | str, view: TrainingView | None = None, **options) -> TrainingDashboard:
        """A dashboard showing what an event log holds so far; ``follow`` continues it.
        ``view`` may come pre-filled (what the run store knows of the run)."""
        dashboard = cls(**options)
        if view is not None:
            dashboard.view = view
        events, dashboard.offset = read_events(path)
        dashboard.feed(events)
        return dashboard

    def follow(self, path: Path | str, until: Callable[[], bool] | None = None, stop_at_end: bool = True) -> int:
        self.offset = follow(self, path, self.offset, until=until, stop_at_end=stop_at_end)
        return self.offset

    # -- details ----------------------------------------------------------------------------
    def _clicked(self, _button) -> None:
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping…"
        if self.stop is not None:
            self.stop.request()
        if self.on_stop is not None:
            self.on_stop()

    def _set_progress_text(self) -> None:
        self._clock_drawn = time.monotonic()
        self._set(self.progress_label, "value", self._progress_text())

    def _progress_text(self) -> str:
        view = self.view
        parts = [steps_text(view)]
        if view.eta is not None and not view.finished:
            parts.append(f"ETA {duration(view.eta)}")
        elapsed = view.elapsed_at(time.time())
        if elapsed is not None:
            parts.append(f"elapsed {duration(elapsed)}")
        return " · ".join(parts)

    def _look_up_tracking(self, force: bool = False) -> None:
        """Where ``--track`` sent the run (``trackers.where``): named as the destination first,
        then as its follower found it (the TensorBoard folder, the MLflow run and its page)."""
        view = self.view
        if not view.track or (not force and time.monotonic() - self._tracking_checked < TRACKING_EVERY_S):
            return
        self._tracking_checked = time.monotonic()
        from ..trackers.where import places

        found = [place.text for place in places(view.run_id, view.track, view.name)]
        if found != view.tracking:
            view.tracking = found
            self._drawn_version = -1  # redraw: the view's events did not change

    def _gpu_due(self) -> bool:
        return (self.view.device or "").startswith("cuda") and time.monotonic() - self._gpu_checked > GPU_EVERY_S

    def _sample_gpu(self) -> None:
        """GPU utilisation through NVML (no CUDA call), every few seconds on CUDA runs."""
        if not self._gpu_due():
            return
        self._gpu_checked = time.monotonic()
        self.view.gpu_util = gpu.utilization(_cuda_index(self.view.device))

    @staticmethod
    def _set(widget: widgets.Widget, name: str, value) -> None:
        if getattr(widget, name) != value:
            with widget.hold_sync():
                setattr(widget, name, value)


def _cuda_index(device: str | None) -> int:
    _, _, index = (device or "").partition(":")
    return int(index) if index.isdigit() else 0


def _stats_table(view: TrainingView) -> str:
    rows = "".join(
        f"<tr><td style='color:#666;padding-right:10px'>{k}</td><td><b>{escape(v)}</b></td></tr>"
        for k, v in stat_rows(view)
    )
    return f"<table style='font-size:12px;line-height:1.5'>{rows}</table>"


def _notes(view: TrainingView) -> str:
    lines = [f"<div style='color:#8a6d00'>⚠ {escape(a)}</div>" for a in view.advice]
    if view.first_error:
        lines.append(f"<div style='color:#c62828'>{escape(view.first_error)}</div>")
    if view.message:
        lines.append(f"<div>{escape(view.message)}</div>")
    elif view.checkpoint:
        lines.append(f"<div style='color:#666'>last checkpoint: {escape(na(view.checkpoint))}</div>")
    lines += [f"<div class='jiyu-tracked' style='color:#666'>{escape(line)}</div>" for line in tracking_lines(view)]
    return "".join(lines)
