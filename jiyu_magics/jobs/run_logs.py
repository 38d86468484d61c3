"""A run's ``stdout.log``: its tail, and following it while the run is active.

The text comes without terminal colour codes (``core.text.without_ansi``): a rank's IPython
traceback is coloured for a terminal, and ``jiyu logs`` into a file, a pager or a notebook
cell showed ``\x1b[0;31m`` where the colour was meant. Reads stop at whole lines, so no code is
cut between two reads."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..core.runs.files import RunFiles
from ..core.runs.model import RunStatus
from ..core.store import lost_runs
from ..core.store.run_row import Run
from ..core.store.run_store import RunStore
from ..core.text import without_ansi
from .job_error import JobError

FOLLOW_POLL_S = 0.5
CHUNK = 64 * 1024


def derived_end(run: Run) -> str:
    """The line a run shown lost but not yet recorded so will end with (``lost_runs.log_line``),
    shown after its log without writing it; empty for any other run."""
    return lost_runs.log_line(run.id) if run.derived and run.status == RunStatus.LOST else ""


def no_output_note(run: Run) -> str:
    """What ``jiyu logs`` says of a log with nothing in it: that it is empty, not a failure
    to read, and where the run's progress is (an in-kernel run prints into its cell)."""
    where = RunFiles.of(run.id).events
    state = "has printed nothing yet" if run.active else "printed nothing"
    return f"run {run.id} {state} to its log; its progress is in {where} (jiyu show {run.id})"


def tail(run_id: str, lines: int | None = None, end: str = "") -> tuple[str, int]:
    """The last ``lines`` lines (all when None) and the byte offset to follow from. A run whose
    folder is gone has no log to show: a ``JobError``, not an empty answer that looks fine."""
    if lines is not None and lines < 0:
        raise JobError(f"--tail {lines}: expected a number of lines >= 0")
    files = RunFiles.of(run_id)
    if not files.root.is_dir():
        raise JobError(f"run {run_id} has no folder any more ({files.root} was deleted): no log to show")
    try:
        with open(files.log, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            data = _all(f) if lines is None else _last_lines(f, size, lines)
    except FileNotFoundError:
        data, size = b"", 0
    text = without_ansi(data.decode("utf-8", "replace")) + end
    if lines is not None and end:
        text = "".join(text.splitlines(keepends=True)[-lines:]) if lines else ""
    return text, size


def _all(f: BinaryIO) -> bytes:
    f.seek(0)
    return f.read()


def _last_lines(f, size: int, lines: int) -> bytes:
    """Reads backwards a block at a time: a multi-gigabyte log costs what its tail costs."""
    pos, data = size, b""
    while pos > 0 and data.count(b"\n") <= lines:
        step = min(CHUNK, pos)
        pos -= step
        f.seek(pos)
        data = f.read(step) + data
    return b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""


def read_from(run_id: str, offset: int) -> tuple[str, int]:
    """New complete lines from byte ``offset``; a line still being written waits."""
    try:
        with open(RunFiles.of(run_id).log, "rb") as f:
            f.seek(offset)
            data = f.read(CHUNK)
    except FileNotFoundError:
        return "", offset
    end = data.rfind(b"\n") + 1
    return without_ansi(data[:end].decode("utf-8", "replace")), offset + end


def follow(
    run_id: str,
    offset: int,
    store: RunStore | None = None,
    poll: float = FOLLOW_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """Chunks of new log text until the run ends (and its last lines are read)."""
    store = store or RunStore()
    while True:
        run = store.get(run_id)  # a run whose supervisor vanished reads lost: not followed forever
        active = run.active
        text, offset = read_from(run_id, offset)
        while text:
            yield text
            text, offset = read_from(run_id, offset)
        if not active:
            rest = _unterminated_rest(run_id, offset) + derived_end(run)
            if rest:
                yield rest
            return
        sleep(poll)


def _unterminated_rest(run_id: str, offset: int) -> str:
    path = RunFiles.of(run_id).log
    if not path.exists() or os.path.getsize(path) <= offset:
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return without_ansi(f.read().decode("utf-8", "replace"))
