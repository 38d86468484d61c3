"""A kernel's history as the torchrun ranks of ``%%train --nproc`` replay it.

Earlier ``%%train`` cells already trained in the kernel, and their result reaches the ranks as
weights (``JIYU_INIT_WEIGHTS``), so the ranks run only their set-up body; ``%train`` lines are
left out for the same reason. A ``%%train`` cell that raised after its body ran (no
``train_loader`` yet, a NaN) still replays its set-up: the kernel kept what the body bound.
Everything else replays as the kernel ran it.
"""

from __future__ import annotations

import re

from .notebook_export import ExecutedCell

TRAIN_CELL = re.compile(r"\A\s*%%train\b([^\n]*)\n?")
TRAIN_LINE = re.compile(r"^(\s*)%train\b.*$", re.MULTILINE)


def setup_only(cell: ExecutedCell) -> ExecutedCell:
    source = cell.source
    header = TRAIN_CELL.match(source)
    if header:
        source = f"# %%train{header.group(1)}: trained in the kernel, set-up only here\n" + source[header.end() :]
    source = TRAIN_LINE.sub(lambda m: f"{m.group(1)}pass  # {m.group(0).strip()}: trained in the kernel", source)
    if source == cell.source:
        return cell
    # the set-up ran in the kernel even where training then raised: what it bound is there, so here too
    return ExecutedCell(source, cell.execution_count, cell.succeeded or bool(header and cell.setup_ran))


def relaunch_history(cells: list[ExecutedCell]) -> list[ExecutedCell]:
    return [setup_only(cell) for cell in cells]
