"""The trackers' own writers behind one small interface; the only modules that import
``tensorboard`` or ``mlflow`` (an import-linter contract keeps it so), and only when a
destination of theirs is opened.

A sink knows how far into the jiyu run's event log it has written (``synced_offset``: kept
with the tracker's own data, so a second follower or export goes on from there and adds no
duplicate), writes a ``Translation`` and records the new offset with it, and ends the tracker
run with the jiyu run's status.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Protocol

from ...core.runs.model import RunStatus
from ..destinations import Destination, TrackSpecError
from ..identity import RunIdentity
from ..translate import Translation

EXTRAS = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # destination kind -> module and extra


class Sink(Protocol):
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


def missing_extra(kind: str) -> str | None:
    """The one line to show when ``kind``'s library is not installed here, else None."""
    module = EXTRAS[kind]
    if importlib.util.find_spec(module) is not None:
        return None
    return f"tracking to {kind} needs the {module} package: pip install 'jiyu-magics[{module}]'"


def check_installed(destinations: Iterable[Destination]) -> None:
    """Raises ``TrackSpecError`` with the pip command when a destination's library is missing:
    said where ``--track`` is typed, before anything starts (no import: a spec lookup)."""
    for destination in destinations:
        line = missing_extra(destination.kind)
        if line:
            raise TrackSpecError(line)
