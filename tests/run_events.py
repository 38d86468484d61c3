"""The events a training run logged, read straight from its events.jsonl (not through the
views or folds under test)."""

from __future__ import annotations

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles


def events_of(result, kind: str | None = None) -> list[dict]:
    """Every event of the run behind ``result`` (a ``FitResult``, or anything with a
    ``run_id``), or only those of one ``kind``."""
    events = read_events(RunFiles.of(result.run_id).events)[0]
    return [e for e in events if kind is None or e["kind"] == kind]
