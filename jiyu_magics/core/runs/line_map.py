"""Which notebook cell and line each line of an exported job script came from.

A job runs ``job.py``, the notebook exported (``jobs.export``); its stacks and tracebacks name
``job.py:54``, a file the user never wrote. The exporter writes ``job.map.json`` beside the
script: per code cell its label (``cell 3``, ``In [5]``), where its code starts in the script,
the cell line of each script line, and its source; and the names the ``parameters`` cell sets
(what a run records as its parameters). Readers (the stack view, rank tracebacks, ``%%train``
in the job) map a frame back with :meth:`LineMap.where`: ``cell 3, line 9`` with the line's
text.

Three kinds of file name reach a frame: the script itself; a replayed history cell compiled
under its label (``In [5]``: ``%%train --nproc``'s best-effort set-up); and the body of a
``%%train`` cell, which IPython runs as a cell of its own (``<ipython-input-1-...>``, or a
kernel's ``/tmp/ipykernel_*/...py``), placed by the script line that called the magic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "jiyu-line-map/1"
IPYTHON_CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|/ipykernel_\d+/\d+\.py$")


@dataclass(frozen=True)
class CellLine:
    """One line of a notebook cell: where a frame is, as the user wrote it."""

    label: str  # "cell 3" (a notebook's), "In [5]" (a kernel's history)
    line: int  # 1-based, in the cell
    text: str  # the cell's line, stripped

    @property
    def where(self) -> str:
        return f"{self.label}, line {self.line}"


@dataclass
class MappedCell:
    label: str
    start: int  # the script line of the cell's first line of code
    lines: list[int | None]  # per script line from ``start``: the cell line it came from
    source: str
    file: str | None = None  # the name its code is compiled under, where not the script's
    body_offset: int = 0  # a cell magic's body: body line 1 is cell line 1 + this

    def cell_line(self, line: int) -> CellLine | None:
        if not 1 <= line <= len(self.source.splitlines()):
            return None
        return CellLine(self.label, line, self.source.splitlines()[line - 1].strip())

    def at_script_line(self, line: int) -> CellLine | None:
        index = line - self.start
        found = self.lines[index] if 0 <= index < len(self.lines) else None
        return self.cell_line(found) if found is not None else None


@dataclass
class LineMap:
    script: str  # the script's file name (``job.py``)
    cells: list[MappedCell]
    parameters: list[str]  # the names the notebook's parameters cell sets

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "script": self.script,
            "parameters": self.parameters,
            "cells": [vars(cell) for cell in self.cells],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LineMap:
        cells = [MappedCell(**cell) for cell in data.get("cells", [])]
        return cls(str(data.get("script", "job.py")), cells, [str(n) for n in data.get("parameters", [])])

    @classmethod
    def read(cls, path: Path) -> LineMap | None:
        """The map at ``path``; None where there is none (a run that exported nothing) or it
        cannot be read: a frame then shows as Python named it."""
        try:
            data = json.loads(Path(path).read_text())
            return cls.from_json(data) if data.get("format") == FORMAT else None
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_json()))
        return path

    # -- mapping ---------------------------------------------------------------------------
    def where(self, file: str, line: int, caller: CellLine | None = None) -> CellLine | None:
        """The cell line of a frame at ``file:line``. ``caller``: where the nearest outer frame
        of the script is (for a ``%%train`` body, the line that ran the magic)."""
        if Path(file).name == self.script:
            cell = self._cell_at(line)
            return cell.at_script_line(line) if cell is not None else None
        for cell in self.cells:
            if cell.file is not None and cell.file == file:
                return cell.at_script_line(line)
        if caller is not None and IPYTHON_CELL_FILE.search(file):
            cell = next((c for c in self.cells if c.label == caller.label), None)
            return cell.cell_line(line + 1) if cell is not None and cell.source.lstrip().startswith("%%") else None
        return None

    def frames(self, frames: list[tuple[str, int]]) -> list[CellLine | None]:
        """Each (file, line) of a stack, outermost first, mapped; the body of a cell magic
        takes its cell from the script frame that called it."""
        mapped: list[CellLine | None] = []
        caller: CellLine | None = None
        for file, line in frames:
            found = self.where(file, line, caller)
            if found is not None and Path(file).name == self.script:
                caller = found
            mapped.append(found)
        return mapped

    def _cell_at(self, line: int) -> MappedCell | None:
        found = None
        for cell in self.cells:
            if cell.file is None and cell.start <= line:
                found = cell
        return found


FILE_LINE = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line (?P<line>\d+)(?P<rest>.*)$')


def map_traceback(lines: list[str], line_map: LineMap | None) -> list[str]:
    """A printed traceback with each frame of the script (or of a cell it ran) named by its
    notebook cell: ``File "/…/job.py", line 54, in train_step`` becomes ``cell 3, line 9, in
    train_step``; the source line Python printed under it stays."""
    if line_map is None:
        return lines
    out, caller = [], None
    for text in lines:
        found = FILE_LINE.match(text)
        mapped = line_map.where(found["file"], int(found["line"]), caller) if found else None
        if found and mapped is not None:
            if Path(found["file"]).name == line_map.script:
                caller = mapped
            text = f"{found['indent']}{mapped.where}{found['rest']}"
        out.append(text)
    return out
