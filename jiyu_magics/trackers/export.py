"""A finished run into a tracker after the fact: ``jiyu track ID --to tensorboard|mlflow``.

The same follower as a live run's, closed at once, writing only to the destination asked for
(not those the run's cells named): it goes on from the offset the tracker already holds for the
run (none: from the start), so exporting twice, or exporting a run that was followed live,
writes nothing new. A run still active is refused: its owner's follower is
the one that writes it (``--track`` at launch), and an export would only race it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.runs.files import RunFiles
from ..core.store.run_store import Run
from .destinations import Destination
from .follower import TrackerFollower


class ExportRefused(ValueError):
    """The run cannot be exported now; ``str()`` says why in one line."""


@dataclass
class Exported:
    run: Run
    destination: Destination
    events: int  # events written now (0: the tracker had them all)
    error: str | None = None  # the tracker's own failure, as the follower said it

    def line(self) -> str:
        where = self.destination.label
        if self.error:
            return f"run {self.run.id} ({self.run.name}): not exported to {where}: {self.error}"
        if not self.events:
            return f"run {self.run.id} ({self.run.name}): already in {where}"
        return f"run {self.run.id} ({self.run.name}): {self.events} events exported to {where}"


def export_run(run: Run, destination: Destination) -> Exported:
    if run.active:
        raise ExportRefused(
            f"run {run.id} is {run.status}: export it once it ended, or follow it live with --track at its launch"
        )
    if not RunFiles.of(run.id).events.exists():
        raise ExportRefused(f"run {run.id} ({run.name}) has no event log to export")
    follower = TrackerFollower(run.id, [destination], say=lambda line: None, named_in_log=False)
    follower.close(run.status)
    syncing = follower.syncing[0]
    return Exported(run, destination, syncing.written, syncing.error)
