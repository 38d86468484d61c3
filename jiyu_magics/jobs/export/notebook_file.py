"""An ``.ipynb`` file as plain data, read with ``json`` alone.

``nbformat.read`` imports jsonschema's format checkers (nbformat → jupyter_events →
rfc3987_syntax builds a grammar at import): about a second in a fresh process, most of what
``jiyu export`` and ``jiyu submit`` cost. An export needs each cell's type, source, tags and
execution count, which a version-4 notebook holds as plain JSON; only an older notebook
(nbformat 3 and before, which needs converting) goes through nbformat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..job_error import JobError

CELL_TYPES = ("code", "markdown", "raw")


def read_cells(path: Path) -> tuple[dict, list[dict]]:
    """The notebook's metadata and its cells, each ``{"cell_type", "source", "execution_count",
    "tags"}`` with ``source`` one string. One ``JobError`` line for anything that is not a
    notebook."""
    if not path.is_file():
        raise JobError(f"{path}: no such notebook" if not path.exists() else f"{path} is not a notebook file")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise JobError(f"{path} is not a Jupyter notebook ({type(error).__name__})") from None
    except OSError as error:
        raise JobError(f"cannot read {path}: {error.strerror or error}") from None
    if isinstance(data, dict) and data.get("nbformat") != 4 and isinstance(data.get("nbformat"), int):
        data = _converted(path)
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or not isinstance(data.get("metadata", {}), dict):
        raise JobError(f"{path} is not a Jupyter notebook (no list of cells)")
    return data.get("metadata", {}), [_cell(path, index, cell) for index, cell in enumerate(cells)]


def _cell(path: Path, index: int, cell: Any) -> dict:
    if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
        raise JobError(f"{path} is not a Jupyter notebook (cell {index + 1} is not a code, markdown or raw cell)")
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise JobError(f"{path} is not a Jupyter notebook (cell {index + 1} has no text source)")
    metadata = cell.get("metadata")
    tags = metadata.get("tags") if isinstance(metadata, dict) else None
    if not isinstance(tags, list):
        tags = []
    count = cell.get("execution_count")
    return {
        "cell_type": cell["cell_type"],
        "source": source,
        "tags": frozenset(map(str, tags)),
        "execution_count": count if isinstance(count, int) else None,
    }


def _converted(path: Path) -> dict:
    """An older notebook format, upgraded by nbformat (the slow import, paid only here)."""
    import nbformat

    try:
        notebook: dict = nbformat.read(path, as_version=4)
        return notebook
    except Exception as error:  # nbformat raises JSON, schema and version errors of many types
        raise JobError(f"{path} is not a Jupyter notebook ({type(error).__name__})") from None
