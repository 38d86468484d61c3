"""Which error this rank's torchrun error file names, and whether an ending error arose from it.

``fit`` writes the file the moment a rank fails (torchrun names the earliest failure the root
cause, by the time in the file), before it knows whether the script catches the error. A
script may catch it and go on; the file must then give way to whatever really ends the rank.
The engine (``train``) notes what it wrote; the rank's entry point (``jobs``) and the bare
torchrun hook decide at the end. The one fact lives here because those two may not import
each other. Per process, like ``job_stop``.
"""

from __future__ import annotations

import json
import time

_recorded: BaseException | None = None


def note_recorded(error: BaseException) -> None:
    """The error now in this rank's torchrun error file."""
    global _recorded
    _recorded = error


def recorded() -> BaseException | None:
    return _recorded


def arose_from_recorded(error: BaseException | None) -> bool:
    """True when the recorded error is ``error`` or in its chain (its cause or the error being
    handled when it was raised): the file's account then still holds for the rank's end."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if error is _recorded:
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def write_error_file(path: str, error: BaseException, callstack: str) -> None:
    """torch elastic's per-rank error file, in the layout of its ``ErrorHandler`` (torchrun
    prints ``py_callstack`` as the rank's traceback), for an error no longer being handled
    (``ErrorHandler`` takes the stack from ``traceback.format_exc``)."""
    data = {
        "message": {
            "message": f"{type(error).__name__}: {error}",
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass  # the rank ends either way; torchrun then says "a child process failed"
