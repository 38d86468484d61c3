"""The trackers' own writers behind one small interface; the only modules that import
``tensorboard`` or ``mlflow`` (an import-linter contract keeps it so), and only when a
destination of theirs is opened.

A sink knows how far into the jiyu run's event log it has written (``synced_offset``: kept
with the tracker's own data, so a second follower or export goes on from there and adds no
duplicate), writes a ``Translation`` and records the new offset with it, and ends the tracker
run with the jiyu run's status.
"""

from __future__ import annotations

import os
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


# MLflow's client retries a request 7 times with a doubling backoff: 4 minutes before a server
# that is down (or a port where nothing listens) is said. The follower retries on its own clock
# (``follower.RETRY_S``), so one request gives up after a few seconds. Nor does it print a link
# to the run on stdout at each end (``jiyu track`` says one line per run). A variable the user
# set keeps its value.
MLFLOW_HTTP = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}


def open_sink(destination: Destination, identity: RunIdentity) -> Sink:
    check_installed([destination])
    if destination.kind == "tensorboard":
        from .tensorboard import TensorBoardSink

        return TensorBoardSink(destination.target, identity)
    for name, value in MLFLOW_HTTP.items():
        os.environ.setdefault(name, value)
    from .mlflow import MlflowSink

    return MlflowSink(destination.target, identity)
