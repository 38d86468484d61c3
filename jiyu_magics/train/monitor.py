"""What the engine reports to while it trains: the protocol every live view implements (the
notebook dashboard, text progress), and the monitor used when nobody watches.

The engine only emits events and polls by wall clock; drawing is the monitor's business, so
the training package imports no view code.
"""

from __future__ import annotations

import math
from typing import Protocol


class Monitor(Protocol):
    """The dashboard and the text progress; fed events, polled every ``interval`` seconds."""

    interval: float

    def feed(self, events: list[dict]) -> None: ...

    def poll(self) -> None: ...


class NullMonitor:
    """What the loop talks to when nobody watches."""

    interval = math.inf

    def feed(self, events: list[dict]) -> None:
        pass

    def poll(self) -> None:
        pass
