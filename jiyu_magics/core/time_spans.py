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
    """The unix time ``text`` names; ``ValueError`` with what was expected otherwise."""
    match = SPAN.fullmatch(text)
    if match:
        return time.time() - float(match.group(1)) * UNITS[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"expected a span such as 7d, 12h, 30m, or a date (2026-11-01), got {text!r}") from None
