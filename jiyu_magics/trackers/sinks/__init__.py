"""The trackers' own writers behind one small interface; the only modules that import
``tensorboard`` or ``mlflow`` (an import-linter contract keeps it so), and only when a
destination of theirs is opened.

A sink knows how far into the jiyu run's event log it has written (``synced_offset``: kept
with the tracker's own data, so a second follower or export goes on from there and adds no
duplicate), writes a ``Translation`` and records the new offset with it, and ends the tracker
run with the jiyu run's status.
"""

from __future__ import annotations

from typing import Protocol

from ...core.runs.model import RunStatus
from ..destinations import Destination
from ..extras import check_installed
from ..identity import RunIdentity
from ..translate import Translation
from ..where import Place


class Sink(Protocol):
    def place(self) -> Place: ...

    def synced_offset(self) -> int: ...

    def write(self, translation: Translation, offset: int) -> None: ...

    def finish(self, status: RunStatus | None) -> None: ...

    def close(self) -> None: ...


def open_sink(destination: Destination, identity: RunIdentity) -> Sink:
    check_installed([destination])
    if destination.kind == "tensorboard":
        from .tensorboard import TensorBoardSink

        return TensorBoardSink(destination.target, identity)
    from .mlflow import MlflowSink

    return MlflowSink(destination.target, identity)
