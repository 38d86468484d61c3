"""An error as the one line a run's row, log and views show."""

from __future__ import annotations

MAX_ERROR_CHARS = 500


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    first = " ".join(text.split())
    return first if len(first) <= MAX_ERROR_CHARS else first[:MAX_ERROR_CHARS - 1] + "…"
