"""One stack dump as text and as JSON: a headline per group of ranks with identical stacks,
then each group's stack once. A job's frames are named by their notebook cell (``cell 3, line
9``, with the line's text) where its line map says (``core.runs.line_map``); the user's frames
come first, library frames after them, and the frames of jiyu, IPython, runpy and torchrun
that only carry the user's code to the rank are folded (counted; ``--full`` shows them)."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from ..core.runs.line_map import LineMap
from ..core.runs.stack_groups import FrameKind, ShownFrame, StackGroup, shown_frames


class StackFrameJson(TypedDict):
    """One frame, with where it is in the notebook when the run's line map says."""

    file: str
    line: int
    func: str
    kind: FrameKind
    cell: str | None  # "cell 3, line 9" for a frame of an exported notebook's job
    source: str | None  # that line's text


class StackGroupJson(TypedDict):
    """Ranks with identical stacks."""

    ranks: list[int]
    hosts: dict[str, str]  # rank (as text) → host, for a dump across several hosts
    headline: str  # "rank 1 is in train_step (job.py:17)"
    native: bool
    stopped: str | None  # the ranks' process state when they were stopped (SIGSTOP): no stack until continued
    text: str  # every thread, as faulthandler (and py-spy, where it ran) wrote it
    frames: list[StackFrameJson]  # the main thread's, innermost first


def render_text(
    run_id: str, folder: Path, groups: list[StackGroup], full: bool = False, line_map: LineMap | None = None
) -> str:
    lines = [f"Stacks of run {run_id}, dumped {folder.name} ({folder}):"]
    lines += [f"  {g.headline(line_map)}" for g in groups]
    for g in groups:
        lines += ["", f"== {g.who()} =="]
        if g.stopped:
            lines.append("  stopped: it dumps its stack once continued (kill -CONT PID); jiyu stop ends it")
            continue
        if full:
            lines.append(g.text.rstrip())
            continue
        shown = shown_frames(g.frames, line_map)
        user = [f for f in reversed(shown) if f.kind == "user"]
        library = [f for f in reversed(shown) if f.kind == "library"]
        folded = len(shown) - len(user) - len(library)
        if user:
            lines.append("  your code (outermost first):")
            lines += [_line(f) for f in user]
        if library:
            lines.append("  then, in libraries (innermost last):")
            lines += [_line(f) for f in library]
        if folded:
            lines.append(f"  ({folded} frames of jiyu, IPython, runpy and torchrun folded: --full shows them)")
    return "\n".join(lines) + "\n"


def _line(f: ShownFrame) -> str:
    if f.cell is not None:
        return f"    {f.cell.where}, in {f.frame.func}\n        {f.cell.text}"
    return f'    File "{f.frame.file}", line {f.frame.line} in {f.frame.func}'


def as_json(groups: list[StackGroup], line_map: LineMap | None = None) -> list[StackGroupJson]:
    """For the REST API and ``--json``: each group's ranks, headline, frames (innermost first,
    each with its notebook ``cell`` and ``source`` where mapped, and its ``kind``: user,
    library or jiyu) and text."""
    return [
        StackGroupJson(
            ranks=g.ranks,
            hosts={str(rank): host for rank, host in g.hosts.items()},
            headline=g.headline(line_map),
            native=g.native,
            stopped=g.stopped,
            text=g.text,
            frames=[
                StackFrameJson(
                    file=f.frame.file,
                    line=f.frame.line,
                    func=f.frame.func,
                    kind=f.kind,
                    cell=f.cell.where if f.cell else None,
                    source=f.cell.text if f.cell else None,
                )
                for f in shown_frames(g.frames, line_map)
            ],
        )
        for g in groups
    ]
