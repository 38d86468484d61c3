"""The values a ``%%train`` run records as its parameters (``fit(config=...)``), so Compare can
say that ``lr`` changed between two runs where only the notebook changed.

Which names: a cell's tags do not reach the kernel with its code, so the notebook's cell
tagged ``parameters`` is read from where it is:

1. in a job, from the line map its export wrote (``job.map.json``: the names the submitted
   notebook's parameters cell sets, ``-p`` names included);
2. in a kernel, from the saved notebook the server started it for (``JPY_SESSION_NAME``);
3. else (terminal IPython, a notebook without a ``parameters`` cell), the names the magic
   line itself uses as ``{name}``.

Values: what those names hold in the namespace when training starts (after the cell body ran:
a body that sets ``lr`` is recorded with it). Names that are not set, modules, functions and
classes are left out.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any

from ..core.runs.files import RunFiles
from ..core.runs.line_map import LineMap

BRACED = re.compile(r"\{([A-Za-z_]\w*)\}")


def parameter_names(notebook: str | None, run_id: str | None, raw_line: str | None) -> list[str]:
    if run_id:
        mapped = LineMap.read(RunFiles.of(run_id).line_map)
        if mapped is not None and mapped.parameters:
            return mapped.parameters
    if notebook:
        from ..jobs.export.notebook_export import notebook_parameter_names

        names = notebook_parameter_names(Path(notebook))
        if names:
            return names
    return list(dict.fromkeys(BRACED.findall(raw_line or "")))


def run_config(namespace: dict, names: list[str]) -> dict[str, Any]:
    """``name -> value`` for the names set in ``namespace`` to plain data."""
    config = {}
    for name in names:
        value = namespace.get(name, _UNSET)
        if value is _UNSET or isinstance(value, (types.ModuleType, types.FunctionType, type)):
            continue
        config[name] = value
    return config


_UNSET = object()
