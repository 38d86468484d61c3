"""Each rank's output in the cell, under the training dashboard (``%%train --nproc``, ``%job
attach``): the newest lines of the run's log, ``[rankN]``-prefixed, rank 0's with a toggle for
all. It is a display of its own, so it stays when the dashboard turns into its summary. Read
when the follow loop polls (wall clock), never by training; in a terminal the lines are printed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import TextIO

import ipywidgets as widgets
from IPython.display import display

from ..core.runs.rank_output import RankLines, shown

PANE_STYLE = (
    "margin:0;max-height:16em;overflow:auto;font-size:12px;line-height:1.35;"
    "background:var(--jp-layout-color2,#f5f5f5);padding:4px 6px"
)


def pane_html(lines: list[str]) -> str:
    body = escape("\n".join(lines)) if lines else "(no output yet)"
    return f"<pre class='jiyu-rank-output' style='{PANE_STYLE}'>{body}</pre>"


class RankOutput:
    """The widget: an "all ranks" toggle and the lines; ``poll`` reads what the log gained and
    puts the widget in the cell once ``ready()`` (the dashboard above it is shown) or at
    ``finish``: a run that failed before its first event still shows what its ranks said."""

    def __init__(self, log: Path, all_ranks: bool = False, ready: Callable[[], bool] = lambda: True):
        self.source, self.ready, self.shown = RankLines(log), ready, False
        self.toggle = widgets.ToggleButton(
            value=all_ranks,
            description="all ranks",
            icon="list",
            tooltip="Show every rank's output (rank 0's when off)",
            layout=widgets.Layout(width="110px"),
        )
        self.pane = widgets.HTML(pane_html([]))
        self.launcher = True  # torchrun's own lines shown (dropped once the run stopped by request)
        self.toggle.observe(lambda _change: self.render(), names="value")
        self.widget = widgets.VBox([self.toggle, self.pane])

    def poll(self) -> None:
        if self.source.read():
            self.render()
        if not self.shown and self.ready():
            self._display()

    def finish(self, stopped: bool = False) -> None:
        """The last lines. A run ``stopped`` by request drops torchrun's own lines: a rank
        killed after the grace makes it print a 30-line ``ChildFailedError`` report about a
        stop that went as asked (the run's end says how it ended, in one line)."""
        self.launcher = not stopped
        self.poll()
        self.render()
        if not self.shown and self.source.kept:
            self._display()

    def _display(self) -> None:
        self.shown = True
        display(self.widget)

    def render(self) -> None:
        value = pane_html(self.source.lines(self.toggle.value, launcher=self.launcher))
        if self.pane.value != value:
            self.pane.value = value


class RankEcho:
    """Where widgets cannot render: rank 0's new lines (all, with ``all_ranks``) printed as they come."""

    def __init__(self, log: Path, all_ranks: bool = False, out: TextIO | None = None):
        self.source, self.all_ranks, self.out = RankLines(log), all_ranks, out

    def poll(self) -> None:
        for rank, text in self.source.read():
            if self.all_ranks or rank in (None, 0):
                print(shown(rank, text), file=self.out or sys.stdout, flush=True)

    def finish(self, stopped: bool = False) -> None:
        self.poll()
