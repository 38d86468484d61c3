"""What a tracker records of one ``fit`` call, from its ``start`` event, as grouped columns:
``param.`` its parameters (the notebook's ``parameters`` cell, ``-p`` values), ``model.`` (class,
parameter count), ``optimizer.`` (class, hyperparameters per parameter group, scheduler),
``data.`` (batch size, steps per epoch, processes) and ``option.`` (every ``fit`` option).

Compare lays these out side by side (``core.run_comparison``); a run's summary keeps the short
ones but the options (``brief``), so a list of runs can say what tells runs of one name apart
(``lr=0.001``) as Compare would, without reading any event log.
"""

from __future__ import annotations

import json
from typing import Any

DATA: tuple[tuple[str, str], ...] = (
    ("batch_size", "batch_size"),
    ("steps_per_epoch", "steps_per_epoch"),
    ("accum", "accum"),
    ("nproc", "nproc"),
    ("kind", "data"),
    ("total_steps", "total_steps"),
)
BRIEF_VALUE_CHARS = 80  # a longer value (as JSON) is listed as its size
BRIEF_COLUMNS = 64


def tracked(start: dict, params: dict) -> dict:
    """What a tracker records of a call, from its ``start`` event (and the run's ``-p``
    parameters), as grouped columns."""
    config = {**params, **(start.get("config") or {})}
    columns: dict = {f"param.{k}": v for k, v in sorted(config.items())}
    columns["model.class"] = start.get("model")
    columns["model.parameters"] = start.get("params")
    columns["optimizer.class"] = start.get("optimizer")
    groups = start.get("optimizer_groups") or []
    for index, group in enumerate(groups):
        for key, value in group.items():
            columns[f"optimizer.{key}" + (f"[{index}]" if index else "")] = value
    columns["optimizer.scheduler"] = start.get("scheduler")
    for column, key in DATA:
        columns[f"data.{column}"] = start.get(key)
    for key, value in sorted((start.get("options") or {}).items()):
        columns[f"option.{key}"] = value
    return {k: v for k, v in columns.items() if v is not None or k.startswith(("param.", "option."))}


def brief(start: dict) -> dict[str, Any]:
    """The call's columns but its fit options (every call has them all: a list row is no place
    for them), each value as it is when its JSON is short, else ``<N characters>``."""
    columns = {k: v for k, v in tracked(start, {}).items() if not k.startswith("option.")}
    shown = {}
    for column in list(columns)[:BRIEF_COLUMNS]:
        text = json.dumps(columns[column], default=str)
        shown[column] = columns[column] if len(text) <= BRIEF_VALUE_CHARS else f"<{len(text)} characters>"
    return shown
