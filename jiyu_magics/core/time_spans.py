"""``--since`` values as people type them: a span back from now (``30m``, ``12h``, ``7d``,
``2w``) or a date (``2026-11-01``, ``2026-11-01T09:00``), read the same by ``jiyu jobs`` and
``%jobs``."""

from __future__ import annotations

import re
import time
from datetime import datetime

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
SPAN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")


def since_time(text: str) -> float:
    """The unix time ``text`` names; ``ValueError`` with what was expected otherwise (a time
    before 1970 too: no run is older, and the platform's clock cannot show it)."""
    match = SPAN.fullmatch(text)
    try:
        when = (
            time.time() - float(match.group(1)) * UNITS[match.group(2)]
            if match
            else datetime.fromisoformat(text.strip()).timestamp()
        )
    except (ValueError, OverflowError, OSError):
        when = -1.0
    if not 0 <= when < float("inf"):
        raise ValueError(
            f"expected a span such as 7d, 12h, 30m, or a date (2026-11-01), since 1970, got {text[:40]!r}"
        ) from None
    return when
