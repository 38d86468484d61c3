"""What the ranks printed, as the cell shows it: each line of the run's ``stdout.log`` (torchrun
prefixes every rank's line with ``[rankN]:``), the newest ones kept, rank 0's by default; and
the first failing rank's traceback, trimmed of the frames of jiyu and torch elastic that only
carry the user's code to the ranks.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path
from typing import BinaryIO

PREFIX = re.compile(r"^\[rank(?P<rank>\d+)\]:\s?(?P<text>.*)$")
KEPT_LINES = 200
OWNER_LINE_PREFIX = "[jiyu]"  # the owner's own lines in the log (a stall, a stop), kept when torchrun's are dropped
READ_CHUNK = 256 * 1024
START_TAIL = 64 * 1024  # a late reader (``%job attach`` to a long job) starts this far from the end
# the launcher's and the job script's plumbing: jiyu, torch elastic, runpy, and IPython's
# run_line_magic/run_cell_magic frame that the script's `%%train` line goes through
NOISE_FILES = (
    "/jiyu_magics/",
    "/torch/distributed/elastic/",
    "/torch/distributed/run.py",
    "<frozen runpy>",
    "/runpy.py",
    "/IPython/core/interactiveshell.py",
)
FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line \d+')
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def split_rank(line: str) -> tuple[int | None, str]:
    """``[rank1]: hello`` -> (1, "hello"); a launcher's own line has no rank."""
    found = PREFIX.match(line)
    return (int(found["rank"]), found["text"]) if found else (None, line)


class RankLines:
    """The newest ``KEPT_LINES`` lines of every rank, read from the log by byte offset (a
    torn last line waits for the next read); ``lines`` picks rank 0's or all."""

    def __init__(self, log: Path, kept: int = KEPT_LINES):
        self.log = Path(log)
        self.offset: int | None = None  # where the next read starts; None: not read yet
        self.kept: deque[tuple[int | None, str]] = deque(maxlen=kept)

    def read(self) -> list[tuple[int | None, str]]:
        """Takes in the whole lines the log gained, and returns them as (rank, text)."""
        try:
            with open(self.log, "rb") as f:
                offset = self._tail_start(f) if self.offset is None else self.offset
                f.seek(offset)
                data = f.read(READ_CHUNK)
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset = offset + end
        gained = [split_rank(line) for line in data[:end].decode("utf-8", "replace").splitlines()]
        self.kept.extend(gained)
        return gained

    @staticmethod
    def _tail_start(f: BinaryIO) -> int:
        """The start of the first whole line in the log's last ``START_TAIL`` bytes."""
        size = f.seek(0, 2)
        if size <= START_TAIL:
            return 0
        f.seek(size - START_TAIL)
        return size - START_TAIL + len(f.readline())

    def lines(self, all_ranks: bool = False, launcher: bool = True) -> list[str]:
        """Prefixed ``[rankN]``; rank 0's alone unless ``all_ranks``; a launcher's lines unless
        ``launcher`` is false (jiyu's own ``[jiyu]`` lines always)."""
        return [
            shown(rank, text)
            for rank, text in self.kept
            if (all_ranks or rank in (None, 0)) and (launcher or rank is not None or text.startswith(OWNER_LINE_PREFIX))
        ]


def shown(rank: int | None, text: str) -> str:
    return text if rank is None else f"[rank{rank}] {text}"


def first_traceback(log: Path, rank: int) -> str | None:
    """The first traceback ``rank`` printed (with its chained causes), without the frames of
    jiyu, torch elastic and runpy; None when it printed none."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    mine = [body for line_rank, body in map(split_rank, text.splitlines()) if line_rank == rank]
    block = _traceback_block(mine)
    return "\n".join(_without_noise(block)) if block else None


def _traceback_block(lines: list[str]) -> list[str]:
    start = next((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")), None)
    if start is None:
        return []
    block = []
    for i, line in enumerate(lines[start:], start):
        block.append(line)
        if line and not line[0].isspace() and not line.startswith(("Traceback", *CHAINED)):
            following = next((later for later in lines[i + 1 :] if later.strip()), "")
            if not following.startswith(CHAINED) and not following[:1].isspace():
                break  # the exception line, with no chained one after it
    return block


def _without_noise(block: list[str]) -> list[str]:
    """Drops each noise frame's ``File`` line and the indented lines under it (source, carets)."""
    kept, skipping = [], False
    for line in block:
        frame = FRAME.match(line)
        if frame is not None:
            skipping = any(part in frame["file"] for part in NOISE_FILES)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept
