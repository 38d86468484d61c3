"""The event log of a run: ``runs/<id>/events.jsonl``, one JSON object a line.

It is the one source of truth for a run's progress. Rank 0 appends; every view (widget, CLI,
server, ``/metrics``) tails it by byte offset, so training never waits on a reader and a
reader that comes late (a re-attached notebook, a reloaded browser) still sees the whole run.

What a line holds, kind by kind, is declared in ``event_model``; how a stream of them reads as
a run's state, in ``run_state``. Every reader here returns event objects only: a line that is
not one (a torn write, ``42``, ``{"kind": "nope"}``) is skipped and counted in the list's
``skipped``, so one bad line never takes down a view of the whole run.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..runs.model import EventKind
from ..text import bounded
from .fold import SPARKLINE_POINTS, RunState, RunSummary
from .schema import KINDS, is_event

TAIL_BYTES = 64 * 1024
START_MARKER = f'"kind": "{EventKind.START}"'.encode()  # as json.dumps writes it


MAX_TEXT_CHARS = 4096  # of a text field's head, and as many of its tail (``core.text.bounded``)
MAX_LINE_BYTES = 64 * 1024 * 1024  # a reader gives up on a line longer than this (a log not ours)


def _finite(value: Any) -> Any:
    """JSON has no NaN/Inf (browsers reject it); a non-finite number is written as null and
    the event carries the reason in its message instead. Text is bounded: a line of the log
    stays a few KB whatever a message holds, so every reader keeps up."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return bounded(value, MAX_TEXT_CHARS, MAX_TEXT_CHARS)
    return value


class EventLog:
    """Appends events to one run's log. Each event is one ``write`` of a whole line on an
    ``O_APPEND`` file, so a reader never sees half an event from a live writer."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, kind: str, **fields: Any) -> dict:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}; expected one of {', '.join(KINDS)}")
        event = {"t": round(time.time(), 3), "kind": str(kind)}
        event.update({k: _finite(v) for k, v in fields.items() if v is not None})
        os.write(self._fd, (json.dumps(event, allow_nan=False) + "\n").encode())
        return event

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Events(list):
    """Event dicts, plus how many lines were skipped on the way because they were not event
    objects (``RunState.feed`` adds the count to its own)."""

    skipped: int = 0


def parse_lines(lines: Iterable[bytes]) -> Events:
    """The event objects among ``lines``; the rest (a torn line from a killed writer, a line
    someone appended by hand) is counted and left out, and the log stays readable."""
    events = Events()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if is_event(event):
            events.append(event)
        elif line.strip():
            events.skipped += 1
    return events


def read_events(path: Path | str, offset: int = 0, limit_bytes: int | None = None) -> tuple[Events, int]:
    """Events from byte ``offset`` up to the last complete line, and the offset to continue
    from. A line still being written is left for the next call. A line longer than
    ``limit_bytes`` (written by an older jiyu, or by hand) is read whole, its text bounded
    as a writer bounds it now: a follower never stands still at its start."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read() if limit_bytes is None else f.read(limit_bytes)
            end = data.rfind(b"\n") + 1
            if not end and limit_bytes is not None and len(data) == limit_bytes:
                return _long_line(f, offset, data)
    except FileNotFoundError:
        return Events(), offset
    return parse_lines(data[:end].splitlines()), offset + end


def _long_line(f, offset: int, head: bytes, chunk: int = 1024 * 1024) -> tuple[Events, int]:
    """The one line starting at ``offset`` (``head`` already read), as an event with its text
    bounded, and the offset after it; nothing yet while it is still being written. A line past
    ``MAX_LINE_BYTES`` is skipped (counted), not held in memory."""
    parts: list[bytes] | None = [head]
    size = len(head)
    while True:
        block = f.read(chunk)
        if not block:
            return Events(), offset
        cut = block.find(b"\n")
        taken = block if cut < 0 else block[: cut + 1]
        size += len(taken)
        if parts is not None and size <= MAX_LINE_BYTES:
            parts.append(taken)
        else:
            parts = None
        if cut >= 0:
            break
    if parts is None:
        events = Events()
        events.skipped = 1
    else:
        events = parse_lines([b"".join(parts)])
        events[:] = [{k: _finite(v) for k, v in event.items()} for event in events]
    return events, offset + size


def tail_events(path: Path | str, tail_bytes: int = TAIL_BYTES) -> Events:
    """The events in the last ``tail_bytes`` of the log: enough for a summary at O(1) cost
    however long the run has been going."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - tail_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return Events()
    if start:
        data = data[data.find(b"\n") + 1 :]
    data = data[: data.rfind(b"\n") + 1]
    return parse_lines(data.splitlines())


def last_start(path: Path | str, chunk: int = TAIL_BYTES) -> dict | None:
    """The newest ``start`` event (a notebook job calls ``fit`` once per ``%%train`` cell),
    searched backwards chunk by chunk: usually found in the last chunk, never a full read."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            carry = b""
            while end > 0:
                begin = max(0, end - chunk)
                f.seek(begin)
                block = f.read(end - begin) + carry
                lines = block.split(b"\n")
                carry = lines.pop(0) if begin else b""  # maybe a partial line: joined to the next chunk
                for line in reversed(lines):
                    if START_MARKER in line:
                        found = parse_lines([line])
                        start: dict = found[0] if found else {}
                        if start.get("kind") == EventKind.START:
                            return start
                end = begin
            return None
    except FileNotFoundError:
        return None


def summarize(path: Path | str, sparkline_points: int = SPARKLINE_POINTS) -> RunSummary:
    """The latest progress of a run, as every list view shows it, folded from the newest
    ``start`` event and the log's tail: step, total, epoch, last loss, validation metrics,
    throughput, a short loss series, and how it ended."""
    state = RunState()
    start = last_start(path)
    if start is not None:  # older than the tail in a long call (when the tail holds it, it starts afresh there)
        state.feed([start])
    state.feed(tail_events(path))
    return state.summary(sparkline_points)
