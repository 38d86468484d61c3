"""Refresh a text block in place in a terminal until Ctrl-C."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

CLEAR_TO_END = "\x1b[J"


def move_up(lines: int) -> str:
    return f"\x1b[{lines}F" if lines else ""


def watch_text(render: Callable[[], str], seconds: float, out: TextIO | None = None, rounds: int | None = None) -> None:
    """Redraw ``render()`` every ``seconds`` over the previous drawing (no scrolling pile-up).
    ``rounds`` bounds the loop (tests); otherwise it runs until KeyboardInterrupt."""
    out = out or sys.stdout
    previous = 0
    done = 0
    try:
        while rounds is None or done < rounds:
            text = render()
            out.write(move_up(previous) + CLEAR_TO_END + text + "\n")
            out.flush()
            previous = text.count("\n") + 1
            done += 1
            if rounds is None or done < rounds:
                time.sleep(seconds)
    except KeyboardInterrupt:
        out.write("\n")
