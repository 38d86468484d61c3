"""What a tracker records of a run, read from the objects a ``fit`` call trains: the model's
class, the optimizer's class and hyperparameters per parameter group, the scheduler's class,
and the ``fit`` options as they were given. They go into the call's ``start`` event, so the
panel's Compare, ``jiyu show`` and ``jiyu compare`` can say what changed between two runs
(a learning rate edited in the notebook shows even where no ``-p`` was given).

Read once per call, before the first step: nothing here runs in the loop.
"""

from __future__ import annotations

import math
from typing import Any

# The hyperparameters of torch's optimizers worth comparing (each group keeps its own); flags
# that choose an implementation (foreach, fused, capturable, differentiable) are left out.
HYPERPARAMETERS = (
    "lr",
    "weight_decay",
    "betas",
    "momentum",
    "eps",
    "dampening",
    "nesterov",
    "alpha",
    "rho",
    "lr_decay",
    "amsgrad",
    "centered",
    "maximize",
)
SHORT_TEXT = 80  # a value longer than this as text is recorded by its type and length


def optimizer_groups(optimizer: Any) -> list[dict[str, Any]]:
    """One dict per parameter group: the hyperparameters it has, as JSON values."""
    groups = []
    for group in getattr(optimizer, "param_groups", ()):
        groups.append({key: plain(group[key]) for key in HYPERPARAMETERS if key in group and group[key] is not None})
    return groups


def class_name(obj: Any) -> str | None:
    return None if obj is None else type(obj).__name__


def plain(value: Any) -> Any:
    """A value as the event log can hold it: numbers, text, booleans, lists of them; a tensor
    (a learning rate given as one) as its number; anything else as its short text."""
    if hasattr(value, "item") and getattr(value, "numel", lambda: 2)() == 1:
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, str) or len(value) <= SHORT_TEXT else f"<{len(value)} characters>"
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)) and len(value) <= 16:
        return [plain(v) for v in value]
    text = repr(value)
    return text if len(text) <= SHORT_TEXT else f"<{type(value).__name__}>"


def options_of(options: Any) -> dict[str, Any]:
    """Every ``fit`` option of the call, defaults included (``None``: the option's rule), as
    JSON values: a comparison then shows ``clip 1.0`` against ``n/a``, not a missing row."""
    return {key: plain(value) for key, value in vars(options).items()}
