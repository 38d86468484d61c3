"""Run notebooks in a real ipykernel through nbclient, as Jupyter would."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook


def notebook(*sources: str, tags: dict[int, list[str]] | None = None) -> nbformat.NotebookNode:
    cells = [new_code_cell(src) for src in sources]
    for index, cell_tags in (tags or {}).items():
        cells[index].metadata["tags"] = cell_tags
    return new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )


def execute(
    nb: nbformat.NotebookNode, cwd: Path, timeout: int = 120, allow_errors: bool = False, **client_options
) -> nbformat.NotebookNode:
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(cwd)}},
        **client_options,
    )
    client.execute()
    return nb


def text_of(cell) -> str:
    """Everything a person would read in a cell's output: streams and text/plain."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out and "text/plain" in out.data:
            parts.append(out.data["text/plain"])
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def html_of(cell) -> str:
    return "".join(out.data.get("text/html", "") for out in cell.get("outputs", []) if "data" in out)


def widget_html(nb: nbformat.NotebookNode, marker: str) -> list[str]:
    """The values of the HTML widgets whose value holds ``marker``, from the widget state an
    execution with ``store_widget_state=True`` saved."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return [
        m["state"]["value"]
        for m in state.values()
        if m.get("model_name") == "HTMLModel" and marker in m["state"].get("value", "")
    ]


def mimetypes_of(cell) -> set[str]:
    return {m for out in cell.get("outputs", []) if "data" in out for m in out.data}


def with_parameters(nb: nbformat.NotebookNode, **params) -> nbformat.NotebookNode:
    """Papermill's convention, as ``-p`` does for jobs: a cell with the overrides right after
    the cell tagged ``parameters``."""
    from jiyu_magics.jobs.export.params import assignment_lines

    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    injected = new_code_cell("\n".join(assignment_lines(params)))
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, injected)
    return nb


def first_logged_step(home: Path, timeout: float = 120.0) -> str:
    """Waits until some run under ``home`` has logged a training step; returns its id (for
    tests that interrupt or stop training mid-run)."""
    from jiyu_magics.core.events.log import read_events

    deadline = time.time() + timeout
    while time.time() < deadline:
        for log in home.glob("runs/*/events.jsonl"):
            if any(e["kind"] == "step" for e in read_events(log)[0]):
                return log.parent.name
        time.sleep(0.1)
    raise AssertionError("training never logged a step")


def screenshot_html(html: str, page: Path, size: str = "900,420") -> None:
    """A notebook output as a page (and a PNG of it where Chromium exists), for people to look at."""
    import shutil
    import subprocess

    page.write_text(f"<html><body style='font-family:sans-serif'>{html}</body></html>")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={page.with_suffix('.png')}",
                f"--window-size={size}",
                page.as_uri(),
            ],
            capture_output=True,
            timeout=60,
        )
