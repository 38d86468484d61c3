"""One stack dump as text: a headline per group of ranks with identical stacks, then each
group's stack once (innermost frame last, as Python prints tracebacks)."""

from __future__ import annotations

from pathlib import Path

from ..core.runs.stack_groups import StackGroup


def render_text(run_id: str, folder: Path, groups: list[StackGroup], full: bool = False) -> str:
    lines = [f"Stacks of run {run_id}, dumped {folder.name} ({folder}):"]
    lines += [f"  {g.headline()}" for g in groups]
    for g in groups:
        lines += ["", f"== {g.who()} =="]
        if full:
            lines.append(g.text.rstrip())
            continue
        lines += [f'  File "{f.file}", line {f.line} in {f.func}' for f in reversed(g.frames)]
    return "\n".join(lines) + "\n"


def as_json(groups: list[StackGroup]) -> list[dict]:
    """For the REST API and ``--json``: each group's ranks, headline, frames (innermost first) and text."""
    return [
        {
            "ranks": g.ranks,
            "hosts": {str(rank): host for rank, host in g.hosts.items()},
            "headline": g.headline(),
            "native": g.native,
            "text": g.text,
            "frames": [{"file": f.file, "line": f.line, "func": f.func} for f in g.frames],
        }
        for g in groups
    ]
