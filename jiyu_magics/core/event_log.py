"""The event log of a run: ``runs/<id>/events.jsonl``, one JSON object a line.

It is the one source of truth for a run's progress. Rank 0 appends; every view (widget, CLI,
server, ``/metrics``) tails it by byte offset, so training never waits on a reader and a
reader that comes late (a re-attached notebook, a reloaded browser) still sees the whole run.

Schema: ``{"t": unix time, "kind": start|step|val|ckpt|gpu|advice|end|error, ...}``. Fields by
kind, as the training engine (``jiyu_magics.train``) writes them, at its log interval only:

- ``start`` (one per ``fit`` call; a run may hold several): ``run_id``, ``name``, ``total_steps``
  (None when unknown), ``epochs``, ``steps_per_epoch``, ``nproc``, ``batch_size`` (per process and
  micro-batch), ``accum``, ``amp`` (bf16|fp16|off), ``device``, ``params`` (parameter count),
  ``strategy`` (single|ddp|fsdp), ``data`` (how batches are made), ``start_step`` (> 0 when
  resumed), ``resumed_from`` (checkpoint path).
- ``step``: ``step`` (optimizer steps so far), ``epoch`` (1-based), ``loss`` (mean since the last
  log, over ranks), ``lr``, ``samples_per_s`` (all ranks), ``mem_alloc``/``mem_reserved``/
  ``mem_peak`` (bytes, CUDA only), ``data_wait`` (share 0..1 of wall time waiting for batches),
  ``grad_norm`` (before clipping, when clipping), ``elapsed`` and ``eta`` (seconds).
- ``val``: ``step``, ``epoch``, ``loss``, ``accuracy`` (None when not a classification).
- ``ckpt``: ``step``, ``path``.  ``advice``: ``step``, ``message``.
- ``end``: ``status`` (succeeded|stopped|failed), ``step``, ``message``, ``elapsed``.
- ``error``: ``message``, ``step``, ``rank``.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable

from .run_model import EventKind

KINDS = EventKind.values()
TAIL_BYTES = 64 * 1024


def _finite(value: Any) -> Any:
    """JSON has no NaN/Inf (browsers reject it); a non-finite number is written as null and
    the event carries the reason in its message instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
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

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: Path | str, offset: int = 0, limit_bytes: int | None = None) -> tuple[list[dict], int]:
    """Events from byte ``offset`` up to the last complete line, and the offset to continue
    from. A line still being written is left for the next call."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read() if limit_bytes is None else f.read(limit_bytes)
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    return list(_parse_lines(data[:end].splitlines())), offset + end


def _parse_lines(lines: Iterable[bytes]) -> Iterable[dict]:
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            continue  # a torn line from a killed writer; the rest of the log stays readable


def tail_events(path: Path | str, tail_bytes: int = TAIL_BYTES) -> list[dict]:
    """The events in the last ``tail_bytes`` of the log: enough for a summary at O(1) cost
    however long the run has been going."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - tail_bytes)
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return []
    if start:
        data = data[data.find(b"\n") + 1:]
    data = data[: data.rfind(b"\n") + 1]
    return list(_parse_lines(data.splitlines()))


def last_start(path: Path | str, chunk: int = TAIL_BYTES) -> dict | None:
    """The newest ``start`` event (a notebook job calls ``fit`` once per ``%%train`` cell),
    searched backwards chunk by chunk: usually found in the last chunk, never a full read."""
    marker = b'"kind": "start"'
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
                    if marker in line:
                        found = list(_parse_lines([line]))
                        if found and found[0].get("kind") == "start":
                            return found[0]
                end = begin
            return None
    except FileNotFoundError:
        return None


def summarize(path: Path | str, sparkline_points: int = 60) -> dict:
    """The latest progress of a run, as every list view shows it: step, total, epoch, last
    loss, validation metrics, throughput, a short loss series, and how it ended."""
    start = last_start(path) or {}
    summary: dict[str, Any] = {
        "total_steps": start.get("total_steps"),
        "step": None, "epoch": None, "loss": None, "lr": None, "samples_per_s": None,
        "val_loss": None, "val_acc": None, "mem_peak": None, "updated": start.get("t"),
        "end_status": None, "error": None, "losses": [],
    }
    losses: list[float] = []
    for event in tail_events(path):
        kind = event.get("kind")
        summary["updated"] = event.get("t", summary["updated"])
        if kind == "start":  # a new fit in the same run: its own total, its own curve
            summary["total_steps"] = event.get("total_steps")
            losses = []
        elif kind == "step":
            for key in ("step", "epoch", "loss", "lr", "samples_per_s", "mem_peak"):
                if event.get(key) is not None:
                    summary[key] = event[key]
            if event.get("loss") is not None:
                losses.append(event["loss"])
        elif kind == "val":
            summary["val_loss"] = event.get("loss", summary["val_loss"])
            summary["val_acc"] = event.get("accuracy", summary["val_acc"])
        elif kind == "end":
            summary["end_status"] = event.get("status")
            summary["step"] = event.get("step", summary["step"])
        elif kind == "error":
            summary["error"] = event.get("message")
    summary["losses"] = losses[-sparkline_points:]
    total, step = summary["total_steps"], summary["step"]
    summary["progress"] = min(1.0, step / total) if total and step is not None else None
    return summary
