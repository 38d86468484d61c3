"""How each worker ended, in torchrun's own words: the signal that killed a rank.

Only a process's parent sees how it ended, and a rank's parent is torchrun's agent. A rank
killed by a signal (``kill -9``, the kernel's OOM killer) writes nothing itself, and the ranks
it leaves behind fail a moment later with "Connection closed by peer": those errors are
recorded, the signal is not. The agent says it in its log, which goes to the run's
``stdout.log`` (unprefixed; the ranks' lines carry ``[rankN]:``), in two forms::

    E1130 ... api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 3350) of binary: ...

and, when it gives up, its failure table, one entry per failed worker::

      rank      : 1 (local_rank: 1)
      exitcode  : -9 (pid: 3350)  (SIGKILL)

A negative exit code is the signal. Once one worker failed, the agent ends the others
("Sending process 3349 closing signal SIGTERM", then SIGKILL after 30 s: "Unable to shutdown
process 3349 via 15, forcefully exiting via 9"): those signals are the agent's own, their
workers victims, not causes. Entries are matched to rank records by pid, so a line about an
earlier attempt's worker never describes a later one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

TAIL_BYTES = 256 * 1024  # the agent's report is written last; a long training log is not read
AGENT_LINE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")
TABLE_LINE = re.compile(r"^\s*exitcode\s*: (-?\d+) \(pid: (\d+)\)", re.MULTILINE)
CLOSING_LINE = re.compile(r"(?:Sending process|Unable to shutdown process) (\d+)")


def exit_codes(log: Path | str) -> dict[int, int]:
    """pid → exit code of every failed worker torchrun reported in the tail of ``log``."""
    text = tail(Path(log))
    found: dict[int, int] = {}
    for pattern in (AGENT_LINE, TABLE_LINE):
        for code, pid in pattern.findall(text):
            found[int(pid)] = int(code)
    return found


def signals(log: Path | str) -> dict[int, int]:
    """pid → the number of the signal that killed it, for the workers killed by one that the
    agent did not send itself."""
    closed = {int(pid) for pid in CLOSING_LINE.findall(tail(Path(log)))}
    return {pid: -code for pid, code in exit_codes(log).items() if code < 0 and pid not in closed}


def tail(path: Path) -> str:
    """The last ``TAIL_BYTES`` of the log, where the agents' and Slurm's last words are."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
