"""The one clock of the benchmarks that time a call in-process (interleaved repetitions, medians)."""

from __future__ import annotations

import time


def timed(fn) -> float:
    """Seconds ``fn()`` took, by ``time.perf_counter`` (monotonic, the finest clock there is)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
