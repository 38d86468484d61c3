"""A run's checkpoints as they are on disk, not as its event log once listed them.

Each ``ckpt`` event records a checkpoint when it is written; ``--keep-ckpts N`` then removes the
older ones (and a user may delete some), so the log lists files that are gone, and a "resume
with" command built from them fails. The run page, ``jiyu show`` and the REST API list what
exists, and say how many were rotated out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ..runs.model import EventKind
from .log import read_events


class RunCheckpoint(TypedDict):
    """One checkpoint that exists (REST ``GET /jiyu/api/runs/{id}/checkpoints``)."""

    step: int | None
    path: str
    bytes: int


@dataclass
class Checkpoints:
    kept: list[RunCheckpoint]  # on disk, oldest first
    rotated: int  # recorded by the run, gone now (--keep-ckpts, or deleted)

    def to_json(self) -> dict:
        return {"checkpoints": self.kept, "rotated": self.rotated}


def recorded(events: list[dict]) -> list[tuple[int | None, str]]:
    """Every checkpoint the run's calls recorded, oldest first, each path once."""
    found: dict[str, int | None] = {}
    for event in events:
        if event.get("kind") == EventKind.CKPT and isinstance(event.get("path"), str):
            found.pop(event["path"], None)
            found[event["path"]] = event.get("step")
    return [(step, path) for path, step in found.items()]


def on_disk(events_path: Path) -> Checkpoints:
    """The run's recorded checkpoints that exist, and how many do not."""
    kept: list[RunCheckpoint] = []
    listed = recorded(read_events(events_path)[0])
    for step, path in listed:
        try:
            size = Path(path).stat().st_size
        except OSError:
            continue
        kept.append(RunCheckpoint(step=step, path=path, bytes=size))
    return Checkpoints(kept, len(listed) - len(kept))
