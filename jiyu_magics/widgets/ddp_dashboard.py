"""The training dashboard of ``%%train --nproc``: rank 0's progress plus each rank's state.

Rank states come from the records the ranks write themselves (``runs/<id>/ranks/``), read at
most every couple of seconds: torchrun reaps its workers, so nobody else sees their exit codes.
"""

from __future__ import annotations

import time
from html import escape

import ipywidgets as widgets

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
    def __init__(self, launch, **options):
        super().__init__(**options)
        self.launch = launch
        self._ranks_checked = 0.0

    def _build(self) -> widgets.VBox:
        box = super()._build()
        self.ranks = widgets.HTML(ranks_html([]))
        box.children = (*box.children, self.ranks)
        return box

    def poll(self) -> None:
        super().poll()
        if self.widget is not None and time.monotonic() - self._ranks_checked > RANKS_EVERY_S:
            self._ranks_checked = time.monotonic()
            self._set(self.ranks, "value", ranks_html(self.launch.ranks()))
