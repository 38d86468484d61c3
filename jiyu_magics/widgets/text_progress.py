"""Training progress as printed lines, where widgets cannot render (terminal IPython,
``JIYU_UI=text``, background jobs' logs): a live monitor, paced by wall clock."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from ..views.train_text import TEXT_INTERVAL_S, progress_line
from ..views.training_view import TrainingView
from .summary_plot import summary_png


class TextProgress:
    """Prints a progress line at most every ``interval`` seconds, only when it changed."""

    def __init__(self, interval: float = TEXT_INTERVAL_S, out: TextIO | None = None):
        self.interval = interval
        self.out = out
        self.view = TrainingView()
        self._printed_version = -1
        self._printed_at = -math.inf
        self.lines = 0

    def feed(self, events: list[dict]) -> None:
        self.view.feed(events)
        for event in events:
            notice = _notice(event)
            if notice:
                self._write(notice)

    def poll(self) -> None:
        """Callers poll as often as they like (a tailing loop checks every second): the clock
        that spaces the lines is kept here. 10% slack, so a caller polling exactly at the
        interval is not skipped for a jitter of microseconds."""
        now = time.monotonic()
        if (self.view.version == self._printed_version or not self.view.losses
                or now - self._printed_at < 0.9 * self.interval):
            return
        self._printed_version, self._printed_at = self.view.version, now
        if self.view.finished:
            return  # close() prints the summary
        self._write(progress_line(self.view))

    def close(self) -> None:
        """The summary line and, in the run folder, the loss plot a terminal cannot show (the
        end of a terminal or background-job run leaves ``loss.png`` as a notebook's does)."""
        if self.view.finished:
            self._write(self.view.message or progress_line(self.view))
            summary_png(self.view)

    def _write(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)
        self.lines += 1


def _notice(event: dict) -> str | None:
    """What a terminal prints at once, as the dashboard shows it in its header and notes: the
    objects taken from the notebook, and advice (a schedule that does not fit the run, input-bound)."""
    kind = event.get("kind") if isinstance(event, dict) else None
    if kind == "start" and event.get("from_notebook"):
        return event["from_notebook"]
    if kind == "advice" and event.get("message"):
        return f"advice: {event['message']}"
    return None
