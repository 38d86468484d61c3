"""An error as one line for a person: ``Type: message``, whitespace folded, cut at a length a
table cell and a log line can hold.

Its own module, so the run's owner (``jobs.lifecycle``) can use it without importing the rank
entry point: ``python -m jiyu_magics.jobs.process.rank_worker`` runs that module as ``__main__``,
and a copy already imported through the package makes runpy warn in every rank's log.
"""

from __future__ import annotations

MAX_ERROR_CHARS = 500


def one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    first = " ".join(text.split())
    return first if len(first) <= MAX_ERROR_CHARS else first[: MAX_ERROR_CHARS - 1] + "…"
