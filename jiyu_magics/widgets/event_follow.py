"""Tailing a run's event log into a live monitor: the loop ``%job attach`` and ``%%train
--nproc`` run, by wall clock, while another process trains."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.events.log import read_events
from ..core.runs.model import EventKind

if TYPE_CHECKING:  # the engine's protocol; importing jiyu_magics.train would import torch
    from ..train.monitor import Monitor


def follow(
    monitor: Monitor,
    path: Path | str,
    offset: int = 0,
    *,
    until: Callable[[], bool] | None = None,
    stop_at_end: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Tails an event log into ``monitor`` until the run's ``end`` event (or ``until()`` is
    true), polling it at its interval: the loop ``%job attach`` and ``%%train --nproc`` run.
    Returns the byte offset reached, to continue from later."""
    while True:
        events, offset = read_events(path, offset)
        if events:
            monitor.feed(events)
        monitor.poll()
        ended = stop_at_end and any(e.get("kind") == EventKind.END for e in events)
        if ended or (until is not None and until()):
            events, offset = read_events(path, offset)
            monitor.feed(events)
            monitor.poll()
            return offset
        sleep(min(monitor.interval, 1.0) if math.isfinite(monitor.interval) else 0.5)
