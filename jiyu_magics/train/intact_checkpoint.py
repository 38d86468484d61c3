"""Which checkpoint a resume loads: the first of its candidates whose files are intact.

A resume names one checkpoint (a path: the only candidate) or a run whose checkpoints it may
take (``--resume last``, ``last-checkpoint``, a torchrun restart's own: newest first). Before
anything loads, every rank checks its share of each candidate's files against the sums saved
with them (``checkpoint_sums.damage``: a sharded checkpoint is read once between the ranks) and
all learn the outcome, so every rank refuses, or loads the same checkpoint. A damaged newest
checkpoint of a run is said in one line and the newest intact one before it is taken; a damaged
path, or a run none of whose checkpoints is intact, is refused in one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .checkpoint import EARLIER
from .checkpoint_sums import damage
from .process_group import DistContext
from .train_errors import TrainConfigError


def first_intact(candidates: list[str], dist: DistContext) -> str:
    """The first intact checkpoint of ``candidates`` (every rank calls it: a collective)."""
    skipped: list[str] = []
    for path in candidates:
        lines = [line for line in dist.gather(damage(Path(path), (dist.rank, dist.world_size))) if line]
        if not lines:
            if skipped and dist.is_writer:
                also = f" ({len(skipped)} damaged ones skipped)" if len(skipped) > 1 else ""
                print(f"jiyu: {skipped[0]}; resuming from the one before it, {path}{also}", file=sys.stderr)
            return path
        skipped.append(lines[0])
    if len(candidates) == 1:
        raise TrainConfigError(f"{skipped[0]}; {EARLIER}")
    raise TrainConfigError(f"{skipped[0]}; none of the {len(candidates) - 1} before it is intact either")
