"""An error in the user's own code under ``%%train``, shown without jiyu's frames.

A ``forward`` that raises inside training used to show its line at the bottom of some twenty
frames of the magic and the engine (fit, the loop, the step, the loss), which the user cannot
act on. The traceback is rebuilt without them: IPython's frame of the cell, then the user's
(and torch's) frames down to the error. An error raised by jiyu's own code keeps every frame:
that one is ours to read.
"""

from __future__ import annotations

import os
from types import TracebackType

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_jiyu_frame(tb: TracebackType) -> bool:
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(PACKAGE_DIR)


def without_jiyu_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without jiyu's frames; None (keep it as it is) when the error is raised in
    jiyu's code or no frame is jiyu's."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    if not frames or is_jiyu_frame(frames[-1]) or not any(map(is_jiyu_frame, frames)):
        return None
    trimmed = None
    for frame in reversed([f for f in frames if not is_jiyu_frame(f)]):
        trimmed = TracebackType(trimmed, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return trimmed


def raise_without_jiyu_frames(error: BaseException) -> None:
    """Raises ``error`` with the user's frames only; returns when there is nothing to trim (the
    caller re-raises it as it is). Frames that re-raise it set ``__tracebackhide__``."""
    __tracebackhide__ = True  # noqa: F841
    trimmed = without_jiyu_frames(error.__traceback__)
    if trimmed is not None:
        raise error.with_traceback(trimmed)
