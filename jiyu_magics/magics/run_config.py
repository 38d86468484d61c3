"""The values a ``%%train`` run records as its parameters (``fit(config=...)``), so Compare can
say that ``lr`` changed between two runs where only the notebook changed.

Which names: a cell's tags do not reach the kernel with its code, so the notebook's cell
tagged ``parameters`` is read from where it is:

1. in a job, from the line map its export wrote (``job.map.json``: the names the submitted
   notebook's parameters cell sets, ``-p`` names included);
2. in a kernel, from the saved notebook the server started it for (``JPY_SESSION_NAME``);
3. else (terminal IPython, a notebook without a ``parameters`` cell), the names the magic
   line itself uses as ``{name}``, and the names the cell's body reads from the notebook that
   hold a number, a string or a boolean (``lr=lr`` in the optimizer's call, ``batch_size``):
   the line's alone left out what the body used, and the run page listed half the story.

Values: what those names hold in the namespace when training starts (after the cell body ran:
a body that sets ``lr`` is recorded with it). Names that are not set, modules, functions and
classes are left out.
"""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path
from typing import Any

from ..core.runs.files import RunFiles
from ..core.runs.line_map import LineMap

BRACED = re.compile(r"\{([A-Za-z_]\w*)\}")


def call_config(
    namespace: dict, notebook: str | None, run_id: str | None, raw_line: str | None, body: str | None
) -> dict[str, Any]:
    """The run's parameters: the parameters cell's names, else the line's and the body's."""
    names = cell_parameter_names(notebook, run_id)
    if names:
        return run_config(namespace, names)
    config = run_config(namespace, list(dict.fromkeys(BRACED.findall(raw_line or ""))))
    for name in read_names(body or ""):
        value = namespace.get(name)
        if name not in config and isinstance(value, (int, float, str)):  # bool is an int
            config[name] = value
    return config


def cell_parameter_names(notebook: str | None, run_id: str | None) -> list[str] | None:
    """The names the notebook's ``parameters`` cell sets (a job's from its line map), or None."""
    if run_id:
        mapped = LineMap.read(RunFiles.of(run_id).line_map)
        if mapped is not None and mapped.parameters:
            return mapped.parameters
    if notebook:
        from ..jobs.export.notebook_export import notebook_parameter_names

        names = notebook_parameter_names(Path(notebook))
        if names:
            return names
    return None


def read_names(body: str) -> list[str]:
    """The names ``body`` reads before (or without) binding them itself, in order: what it
    takes from the notebook. A body Python cannot parse (IPython syntax) gives none."""
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return []
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    loads.sort(key=lambda n: (n.lineno, n.col_offset))
    return list(dict.fromkeys(n.id for n in loads if n.id not in bound))


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
