"""The training dashboard of ``%%train --nproc``: rank 0's progress plus each rank's state.

Rank states come from the records the ranks write themselves (``runs/<id>/ranks/``), read at
most every couple of seconds: torchrun reaps its workers, so nobody else sees their exit codes.

A stall (the owner's ``stall`` event in the log it follows) shows in the header and under it,
with the headline of the stacks dumped then, as the panel shows it; it goes when the step moves.
"""

from __future__ import annotations

import time
from html import escape
from pathlib import Path

import ipywidgets as widgets

from ..core.runs import stack_groups
from ..core.runs.line_map import LineMap
from ..core.runs.model import RankState, RunStatus
from ..views.status_palette import status_colour
from .train_dashboard import TrainingDashboard

RANKS_EVERY_S = 2.0
# a rank's state in the one palette of run statuses
_STATUS_OF_STATE = {
    RankState.RUNNING: RunStatus.RUNNING,
    RankState.EXITED: RunStatus.SUCCEEDED,
    RankState.KILLED: RunStatus.FAILED,
}


def ranks_html(records) -> str:
    chips = []
    for record in records:
        failed = record.failed
        color = status_colour(RunStatus.FAILED if failed else _STATUS_OF_STATE[record.state])
        label = f"exited {record.exit_code}" if record.state is RankState.EXITED else record.state.value
        restart = f" · restart {record.restart}" if record.restart else ""
        chips.append(
            f"<span style='margin-right:12px'><b>rank {record.rank}</b> "
            f"<span style='color:{color}'>{escape(label)}</span>{restart}"
            f" <span style='color:#888'>pid {record.pid}</span></span>"
        )
    return f"<div style='font-size:12px'>{''.join(chips) or 'ranks starting…'}</div>"


class DdpDashboard(TrainingDashboard):
    def __init__(self, launch, **options) -> None:
        super().__init__(**options)
        self.launch = launch
        self._ranks_checked = 0.0
        self.stall: str | None = None  # while stalled: the line saying so, with the stacks' headline

    def _build(self) -> widgets.VBox:
        box = super()._build()
        self.ranks = widgets.HTML(ranks_html([]))
        self.stall_note = widgets.HTML("")
        box.children = (*box.children, self.stall_note, self.ranks)
        return box

    def feed(self, events: list[dict]) -> None:
        for event in events:
            if event.get("kind") == "stall":
                self.stall = None if event.get("cleared") is not None else self._stall_line(event)
                self._drawn_version = -1  # redraw: the view itself has no stall
        super().feed(events)

    def _stall_line(self, event: dict) -> str:
        """``stalled: no step since step 11 · rank 1 is in train_step (cell 2, line 9)``."""
        line = f"stalled: no step since step {event.get('step')}"
        folder = event.get("stacks")
        if folder:
            try:
                groups = stack_groups.group(stack_groups.read_dump(Path(folder)))
                line_map = LineMap.read(self.launch.files.line_map)
                line += "".join(f" · {g.headline(line_map)}" for g in groups[:2])
            except OSError:
                pass
        return line + f" · jiyu stacks {self.launch.run_id}"

    def render(self) -> None:
        super().render()
        stalled = self.stall is not None and not self.view.finished
        note = f"<div style='color:#8a6d00'>⚠ {escape(self.stall)}</div>" if stalled and self.stall else ""
        self._set(self.stall_note, "value", note)
        if stalled:
            self._set(self.header, "value", "<b>stalled</b> · " + self.header.value.split(" · ", 1)[-1])

    def poll(self) -> None:
        super().poll()
        if self.widget is not None and time.monotonic() - self._ranks_checked > RANKS_EVERY_S:
            self._ranks_checked = time.monotonic()
            self._set(self.ranks, "value", ranks_html(self.launch.ranks()))
