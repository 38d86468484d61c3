"""What a ``%%train`` cell prints, also written into its run's ``stdout.log``, so the panel's
Logs and the run page show a kernel run's output as they show a job's (a job's supervisor
writes that file; a kernel run had nobody to). The cell's output is unchanged: the streams
are teed, not taken.

The run id is known only once ``fit`` has registered the run: until its ``start`` event, the
text is held in memory, then written out and the file followed line by line.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from ..core.runs.files import RunFiles


class CellLog:
    def __init__(self) -> None:
        self._held = io.StringIO()
        self._file: TextIO | None = None
        self._dropped = False  # the run's log could not be written: nothing more is kept

    def write(self, text: str) -> None:
        if self._dropped:
            return
        if self._file is not None:
            try:
                self._file.write(text)
                self._file.flush()
            except OSError:  # a full disk: the cell's output goes on, its copy in the run stops
                self._drop_file()
        else:
            self._held.write(text)

    def _drop_file(self) -> None:
        file, self._file = self._file, None
        self._held, self._dropped = io.StringIO(), True
        try:
            if file is not None:
                file.close()
        except OSError:
            pass

    def attach(self, run_id: str) -> None:
        """From now on into ``run_id``'s log (appended: a second fit into one run adds to it)."""
        if self._file is not None:
            return
        try:
            self._file = open(RunFiles.of(run_id).log, "a", encoding="utf-8")
        except OSError:
            return  # the log is a convenience: never a reason for training to fail
        try:
            self._file.write(self._held.getvalue())
            self._file.flush()
        except OSError:
            self._drop_file()

    def close(self) -> None:
        if self._file is not None:
            self._drop_file()
            self._dropped = False


class _Tee:
    """The kernel's stream, and the cell log beside it. Not an ``io.TextIOBase``: that would
    answer ``isatty()`` False itself, and a terminal's in-place progress line needs the
    stream's own answer."""

    def __init__(self, stream: TextIO, log: CellLog):
        self._stream, self._log = stream, log

    def write(self, text: str) -> int:
        self._log.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def __getattr__(self, name: str):  # fileno, encoding, the kernel stream's own API
        return getattr(self._stream, name)


class LoggedMonitor:
    """The monitor the engine talks to, unchanged, telling the cell log the run id on the
    ``start`` event."""

    def __init__(self, monitor, log: CellLog):
        self._monitor, self._log = monitor, log

    def feed(self, events: list[dict]) -> None:
        for event in events:
            if event.get("kind") == "start" and isinstance(event.get("run_id"), str):
                self._log.attach(event["run_id"])
        self._monitor.feed(events)

    def __getattr__(self, name: str):  # interval, poll, close, show...
        return getattr(self._monitor, name)


@contextmanager
def cell_log(launched: bool = False) -> Iterator[CellLog]:
    """``sys.stdout``/``sys.stderr`` teed into a CellLog while the cell trains; nothing teed
    under a launcher, which writes the log itself (``launched``: the call's context names a run,
    ``JIYU_RUN_ID`` of a job or ``--nproc``, or a ranks pool's rank training its kernel's
    ``%%train --nproc``)."""
    log = CellLog()
    if launched:
        yield log
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Tee(out, log), _Tee(err, log)
    try:
        yield log
    finally:
        sys.stdout, sys.stderr = out, err
        log.close()
