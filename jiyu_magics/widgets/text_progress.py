"""Training progress as printed lines, where widgets cannot render (terminal IPython,
``JIYU_UI=text``, background jobs' logs): a live monitor, paced by wall clock."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from ..views.train_text import TEXT_INTERVAL_S, header_text, progress_line, tracking_lines
from ..views.training_view import TrainingView
from .summary_plot import summary_png

TTY_INTERVAL_S = 1.0  # a terminal redraws one line in place, as tqdm does: cheap, so often


class TextProgress:
    """Progress at most every ``interval`` seconds, only when it changed. On a terminal one
    line redrawn in place (carriage return) about once a second, the last one and the summary
    kept; elsewhere (a job's log, a pipe) plain lines every 10 s, since a log cannot redraw."""

    def __init__(self, interval: float | None = None, out: TextIO | None = None):
        self.out = out
        self.tty = _is_terminal(out or sys.stdout)
        self.interval = interval or (TTY_INTERVAL_S if self.tty else TEXT_INTERVAL_S)
        self.view = TrainingView()
        self._printed_version = -1
        self._printed_at = -math.inf
        self._inline = False  # a progress line is on screen without its newline
        self.lines = 0

    def feed(self, events: list[dict]) -> None:
        for event in events:
            self.view.feed([event])
            notice = _notice(event, self.view)
            if notice:
                self._write(notice)

    def poll(self) -> None:
        """Callers poll as often as they like (a tailing loop checks every second): the clock
        that spaces the lines is kept here. 10% slack, so a caller polling exactly at the
        interval is not skipped for a jitter of microseconds."""
        now = time.monotonic()
        if (
            self.view.version == self._printed_version
            or not self.view.losses
            or now - self._printed_at < 0.9 * self.interval
        ):
            return
        self._printed_version, self._printed_at = self.view.version, now
        if self.view.finished:
            return  # close() prints the summary
        if self.tty:
            self._redraw(progress_line(self.view))
        else:
            self._write(progress_line(self.view))

    def close(self) -> None:
        """The summary line and, in the run folder, the loss plot a terminal cannot show (the
        end of a terminal or background-job run leaves ``loss.png`` as a notebook's does)."""
        if self.view.finished:
            if self.tty and self.view.losses:
                self._redraw(progress_line(self.view))  # the final numbers stay on screen
            self._write(self.view.message or progress_line(self.view))
            if self.view.track:
                from ..trackers.where import places

                self.view.tracking = [p.text for p in places(self.view.run_id, self.view.track, self.view.name)]
                for line in tracking_lines(self.view):
                    self._write(line)
            summary_png(self.view)

    def _redraw(self, line: str) -> None:
        """The line in place: back to the line's start, the text, the rest of the old one cleared."""
        stream = self.out or sys.stdout
        stream.write(f"\r{line}\x1b[K")
        stream.flush()
        self._inline = True

    def _write(self, line: str) -> None:
        if self._inline:
            line, self._inline = "\n" + line, False  # keep the progress line, start below it
        print(line, file=self.out or sys.stdout, flush=True)
        self.lines += 1


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or a bare stream
        return False


def _notice(event: dict, view: TrainingView) -> str | None:
    """What a terminal prints at once, as the dashboard shows it in its header and notes: the
    run's header as a call starts (its id, for ``jiyu show ID``; the objects taken from the
    notebook), and advice (a schedule that does not fit the run, input-bound)."""
    kind = event.get("kind") if isinstance(event, dict) else None
    if kind == "start":
        return header_text(view)
    if kind == "advice" and event.get("message"):
        return f"advice: {event['message']}"
    return None
