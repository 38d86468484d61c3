"""What a pool's cell says when ranks fail, hang or die, in words: plain data in, text out.

A failure inside a collective reaches every rank: the one that raised, and the ones whose
collective was aborted because of it. The words name the cause first ("rank 1: ValueError"), the
consequences after ("ranks 0, 2, 3: their collective was aborted"); the same error on several
ranks is one traceback ("ranks 0–7: NameError ..."); a hang names the rank that is missing and the
collective the others wait in, with its sequence number, shapes and the cell line.
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .protocol import Message, RankExit

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CELL_NUMBER = re.compile(r"In ?\[\d+\]")  # ranks count their cells apart (a cell ran on some ranks only)
CELL_FILE = re.compile(r"<ipython-input-(\d+)-")


def ranks_text(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0, 2``, ``ranks 0–7`` (runs of three or more folded)."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        stop = start
        while stop + 1 < len(ordered) and ordered[stop + 1] == ordered[stop] + 1:
            stop += 1
        if stop - start >= 2:
            parts.append(f"{ordered[start]}–{ordered[stop]}")
        else:
            parts.extend(str(r) for r in ordered[start : stop + 1])
        start = stop + 1
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(parts)


def death_line(death: RankExit) -> str:
    """``rank 3 died: killed by SIGKILL — out of memory?``"""
    if death.signal is not None:
        name = _signal_name(death.signal)
        hint = " — out of memory?" if death.signal == signals.SIGKILL else ""
        return f"rank {death.rank} died: killed by {name}{hint}"
    if death.code is not None:
        return f"rank {death.rank} died: its process exited with code {death.code}"
    return f"rank {death.rank} died: its process is gone"


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class ErrorGroup:
    """One error as several ranks raised it."""

    ranks: tuple[int, ...]
    ename: str
    evalue: str
    traceback: tuple[str, ...]

    @property
    def line(self) -> str:
        return f"{ranks_text(self.ranks)}: {self.ename}: {self.evalue}".rstrip(": ")


def group_errors(errors: dict[int, Message]) -> list[ErrorGroup]:
    """Errors with the same type, message and traceback (colours aside) as one, by first rank."""
    groups: dict[tuple[str, str, tuple[str, ...]], list[int]] = {}
    originals: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
    for rank in sorted(errors):
        error = errors[rank]
        stb = tuple(error.get("traceback") or ())
        key = (error["ename"], error["evalue"], tuple(CELL_NUMBER.sub("In[]", ANSI.sub("", line)) for line in stb))
        groups.setdefault(key, []).append(rank)
        originals.setdefault(key, stb)
    found = [ErrorGroup(tuple(ranks), key[0], key[1], originals[key]) for key, ranks in groups.items()]
    return sorted(found, key=lambda group: group.ranks[0])


def collective_at(entry: dict[str, Any]) -> str:
    """``all_reduce #5 (Float [3])``"""
    shapes = ", ".join(
        f"{dtype} {list(size)}"
        for dtype, size in zip(entry.get("dtypes") or [], entry.get("sizes") or [], strict=False)
    )
    return f"{entry.get('op') or 'a collective'} #{entry.get('seq')}" + (f" ({shapes})" if shapes else "")


def cell_line(entry: dict[str, Any]) -> str | None:
    """Where the collective was called from in a cell: ``cell In[4], line 3``."""
    for filename, line, _ in reversed(entry.get("frames") or []):
        match = CELL_FILE.search(str(filename))
        if match:
            return f"cell In[{match.group(1)}], line {line}"
    return None


def waiting_in(ranks: Sequence[int], states: dict[int, Message]) -> dict[int, dict[str, Any]]:
    """The ranks whose newest collective has not completed (they wait in it), with that entry."""
    waiting = {}
    for rank in ranks:
        entries = (states[rank].fields if rank in states else {}).get("entries") or []
        if entries and not entries[-1].get("done"):
            waiting[rank] = entries[-1]
    return waiting


def collective_hang(pending: Sequence[int], states: dict[int, Message]) -> bool:
    """Whether a rank waits in a collective that another of ``pending`` has not entered (it
    runs elsewhere, or waits in another one)."""
    waiting = waiting_in(pending, states)
    seqs = {entry.get("seq") for entry in waiting.values()}
    return bool(waiting) and (len(waiting) < len(pending) or len(seqs) > 1)


def stall_lines(pending: Sequence[int], finished: dict[int, int | None], states: dict[int, Message]) -> list[str]:
    """Who waits in which collective, and who never came to it: ``pending`` ranks are still in
    the cell, ``finished`` ranks left it (with their collective count); ``states`` are the
    ranks' flight records."""
    lines = []
    waiting = waiting_in(pending, states)
    for rank, entry in sorted(waiting.items()):
        where = cell_line(entry)
        lines.append(f"rank {rank} waits in {collective_at(entry)}" + (f" from {where}" if where else ""))
    ops = {(entry.get("seq"), entry.get("op")) for entry in waiting.values()}
    if len({seq for seq, _ in ops}) == 1 and len(ops) > 1:
        lines.append(
            "the ranks called different collectives at the same point: " + ", ".join(sorted(f"{op}" for _, op in ops))
        )
    for rank, count in sorted(finished.items()):
        target = next(iter(waiting.values()), None)
        if target is not None and count is not None and count < (target.get("seq") or 0):
            lines.append(f"rank {rank} left the cell after collective #{count}: it never entered #{target.get('seq')}")
        else:
            lines.append(f"rank {rank} has finished the cell")
    for rank in pending:
        if rank not in waiting:
            lines.append(f"rank {rank} is still running the cell (not in a collective)")
    return lines
