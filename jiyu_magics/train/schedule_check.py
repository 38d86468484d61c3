"""A learning-rate schedule sized for another number of optimizer steps than the run makes.

The usual slip: ``OneCycleLR(optimizer, max_lr, total_steps=epochs * len(train_loader))`` under
``--accum 4`` (a quarter as many optimizer steps: the schedule never gets past its warm-up half),
or under DDP (each rank takes 1/N of the batches). The opposite fails late: OneCycleLR raises
"Tried to step N times" after its last step, and a cosine schedule climbs back up. Only the
schedulers whose length is one number are checked; a warm-up (``LinearLR``) is short on purpose.
"""

from __future__ import annotations

from typing import Any

SIZED_BY = {"OneCycleLR": "total_steps", "CosineAnnealingLR": "T_max"}  # class name -> its length


def schedule_mismatch(
    scheduler: Any, interval: str, run_steps: int | None, accum: int = 1, world_size: int = 1
) -> str | None:
    """One line of advice when a step-wise ``scheduler`` has not exactly ``run_steps`` steps
    left; None when it fits or cannot be told (epoch-wise, unknown run length, other kinds)."""
    name = type(scheduler).__name__
    length = SIZED_BY.get(name)
    if scheduler is None or interval != "step" or run_steps is None or length is None:
        return None
    sized = getattr(scheduler, length, None)
    if not isinstance(sized, int):
        return None
    left = sized - max(0, int(getattr(scheduler, "last_epoch", 0)))
    if left == run_steps:
        return None
    what = (
        f"{name} is sized for {left} more steps ({length}={sized}) but this run makes {run_steps} "
        f"optimizer steps{_why(accum, world_size)}"
    )
    if left > run_steps:
        return f"{what}: its schedule will not finish. Size it with {length}={sized - left + run_steps}."
    after = "then raises 'Tried to step'" if name == "OneCycleLR" else "then climbs back up"
    return f"{what}: it runs out after {left} of them and {after}. Size it with {length}={sized - left + run_steps}."


def _why(accum: int, world_size: int) -> str:
    reasons = []
    if accum > 1:
        reasons.append(f"--accum {accum}: one optimizer step per {accum} batches")
    if world_size > 1:
        reasons.append(f"{world_size} processes: each takes 1/{world_size} of the batches")
    return f" ({'; '.join(reasons)})" if reasons else ""
