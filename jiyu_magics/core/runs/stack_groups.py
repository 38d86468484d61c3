"""Every rank's stack of one dump (``runs/<id>/stacks/<time>/rank<N>.txt``), grouped by
identical stacks, so "rank 1 is in ``train_step``, ranks 0 are in ``backward``" reads at a
glance however many ranks a run has.

A dump is ``faulthandler``'s text (``Thread 0x... (most recent call first):`` then ``File
"...", line N in func`` lines, the thread the signal interrupted marked ``Current thread``),
optionally followed by ``py-spy dump --native`` output, kept as it is. Ranks are grouped by
their main thread's frames (file, line, function): thread ids and other threads differ
between ranks that wait in the same place.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .files import RunFiles
from .line_map import CellLine, LineMap

FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-f]+)")
NATIVE_MARKER = "--- py-spy dump"
STOPPED_MARK = "--- jiyu: the rank is stopped, process state"  # then T or t (``jobs.stack_dump``)
HOSTS_FILE = "hosts.json"  # in a dump folder: {rank: host}, where the ranks ran
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/jiyu_magics/")
# what carries the user's code to a rank: folded away in the stack views
PLUMBING_PARTS = (
    "/jiyu_magics/",
    "<frozen runpy>",
    "/runpy.py",
    "/IPython/",
    "/ipykernel/",
    "/torch/distributed/elastic/",
    "/torch/distributed/run.py",
    "/threading.py",
)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    @property
    def where(self) -> str:
        return f"{self.func} ({Path(self.file).name}:{self.line})"

    @property
    def is_user_code(self) -> bool:
        return not any(part in self.file for part in LIBRARY_PARTS)


FrameKind = Literal["user", "library", "jiyu"]  # the user's code, a library's, or what carries it to the rank


@dataclass(frozen=True)
class ShownFrame:
    """A frame as the stack views show it: where it is in the notebook, when it is the user's
    code of an exported job, and whether it is the user's, a library's or the plumbing's."""

    frame: Frame
    cell: CellLine | None
    kind: FrameKind

    @property
    def where(self) -> str:
        return f"{self.frame.func} ({self.cell.where})" if self.cell else self.frame.where


def shown_frames(frames: tuple[Frame, ...], line_map: LineMap | None) -> list[ShownFrame]:
    """``frames`` (innermost first) with their cells (``line_map``) and kinds, innermost first."""
    outer_first = list(reversed(frames))
    cells = line_map.frames([(f.file, f.line) for f in outer_first]) if line_map else [None] * len(frames)
    shown = []
    for frame, cell in zip(outer_first, cells, strict=True):
        script = line_map is not None and Path(frame.file).name == line_map.script
        kind: FrameKind
        if cell is not None:
            kind = "user"
        elif script or any(part in frame.file for part in PLUMBING_PARTS):
            kind = "jiyu"  # the script's own header and stop points, or what runs it
        else:
            kind = "user" if frame.is_user_code else "library"
        shown.append(ShownFrame(frame, cell, kind))
    return list(reversed(shown))


@dataclass
class RankStack:
    rank: int
    frames: tuple[Frame, ...]  # the main thread's, innermost first
    text: str  # the whole dump, every thread (and py-spy's native frames)
    host: str | None = None  # where it ran, when the dump says
    stopped: str | None = None  # its process state when it was stopped (T: SIGSTOP; t: a tracer)


@dataclass
class StackGroup:
    ranks: list[int]
    frames: tuple[Frame, ...]
    text: str = ""
    native: bool = field(default=False)
    hosts: dict[int, str] = field(default_factory=dict)  # rank → host, for a dump across several hosts
    stopped: str | None = None  # the ranks' process state when they were stopped (``RankStack.stopped``)

    def who(self) -> str:
        """``rank 1``, ``ranks 0, 2``; with their hosts when the dump spans several:
        ``rank 1 on n2``, ``ranks 0 (n1), 2 (n2)``."""
        if len(self.ranks) == 1:
            host = self.hosts.get(self.ranks[0])
            return f"rank {self.ranks[0]}" + (f" on {host}" if host else "")
        named = [f"{r} ({self.hosts[r]})" if r in self.hosts else str(r) for r in self.ranks]
        return f"ranks {', '.join(named)}"

    def headline(self, line_map: LineMap | None = None) -> str:
        """``ranks 0, 2 are in all_reduce (distributed_c10d.py:2806), from train_step (cell 3,
        line 9)``: the notebook cell where the job's line map names it, else the file."""
        who = f"{self.who()} {'is' if len(self.ranks) == 1 else 'are'}"
        if self.stopped:
            by = "a debugger or tracer" if self.stopped == "t" else "SIGSTOP or Ctrl-Z"
            return f"{who} stopped (process state {self.stopped}, by {by}): it runs nothing until it gets SIGCONT"
        if not self.frames:
            return f"{who} outside Python (no frames dumped)"
        shown = shown_frames(self.frames, line_map)
        inner, user = shown[0], next((f for f in shown if f.kind == "user"), None)
        tail = f", from {user.where}" if user is not None and user != inner else ""
        return f"{who} in {inner.where}{tail}"


def parse_dump(rank: int, text: str) -> RankStack:
    """The main thread's frames: the ``Current thread`` block, else the last block (faulthandler
    lists the main thread last)."""
    blocks: list[tuple[bool, list[Frame]]] = []
    for line in text.split(NATIVE_MARKER)[0].splitlines():
        if (thread := THREAD.match(line)) is not None:
            blocks.append((thread["current"] == "Current thread", []))
        elif (frame := FRAME.match(line)) is not None and blocks:
            blocks[-1][1].append(Frame(frame["file"], int(frame["line"]), frame["func"]))
    chosen = next((frames for current, frames in blocks if current), blocks[-1][1] if blocks else [])
    stopped = text[len(STOPPED_MARK) :].split()[:1] if text.startswith(STOPPED_MARK) else []
    return RankStack(rank, tuple(chosen), text, stopped=stopped[0] if stopped else None)


def group(stacks: list[RankStack]) -> list[StackGroup]:
    """Ranks with the same main-thread frames together; the smallest group first (the odd one
    out is usually the culprit), then by first rank."""
    several_hosts = len({s.host for s in stacks if s.host}) > 1
    groups: dict[tuple, StackGroup] = {}
    for stack in sorted(stacks, key=lambda s: s.rank):
        key = (stack.frames, stack.stopped)
        found = groups.setdefault(key, StackGroup([], stack.frames, stack.text, stopped=stack.stopped))
        found.ranks.append(stack.rank)
        found.native |= NATIVE_MARKER in stack.text
        if several_hosts and stack.host:
            found.hosts[stack.rank] = stack.host
    return sorted(groups.values(), key=lambda g: (len(g.ranks), g.ranks[0]))


def dump_folders(run_id: str) -> list[Path]:
    """The run's stack dumps, oldest first."""
    root = RunFiles.of(run_id).stacks
    if not root.is_dir():
        return []
    whole = (p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))  # not one being written
    return sorted(whole, key=lambda p: p.name)


def read_dump(folder: Path) -> list[RankStack]:
    try:
        hosts = json.loads((folder / HOSTS_FILE).read_text())
    except (OSError, ValueError):
        hosts = {}
    stacks = []
    for path in folder.glob("rank*.txt"):
        if path.stem[4:].isdigit():
            stack = parse_dump(int(path.stem[4:]), path.read_text(errors="replace"))
            stack.host = hosts.get(str(stack.rank)) if isinstance(hosts, dict) else None
            stacks.append(stack)
    return sorted(stacks, key=lambda s: s.rank)
