"""One run as ``jiyu show ID`` prints it: what it is, what it was trained with (parameters,
model, optimizer, data, options, as its ``start`` event recorded them), where it got to, its
lineage (the run it resumed from, the runs that resumed it) and the checkpoints that exist,
each with the command that resumes from it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..core.events.checkpoints import Checkpoints
from ..core.events.fold import RunState
from ..core.run_comparison import INTERNAL_OPTIONS
from ..core.store.run_row import Run
from .format import NA, duration, human_bytes, na
from .train_text import num, percent

LABEL = 12


@dataclass
class RunDetails:
    run: Run
    state: RunState
    checkpoints: Checkpoints
    parent: Run | None = None  # the run this one's last call resumed from
    children: list[Run] = field(default_factory=list)  # the runs that resumed from this one


def render_text(d: RunDetails) -> str:
    run, s = d.run, d.state
    lines = [f"{run.name}  (run {run.id}, {run.kind}, {run.status})"]
    add = lambda label, text: lines.append(f"{label:<{LABEL}}{text}")  # noqa: E731
    add("notebook", f"{na(run.notebook)} · wall time {duration(run.duration)}")
    if run.leftovers:
        count = len(run.leftovers)
        add(
            "leftovers",
            f"{count} leftover process{'es' if count > 1 else ''} ({', '.join(run.leftovers)}) still carry its id;"
            f" jiyu stop {run.id} ends them",
        )
    lineage = lineage_text(d)
    if lineage:
        add("lineage", lineage)
    if run.params or s.config:
        add("parameters", pairs({**run.params, **(s.config or {})}))
    if s.model:
        add("model", f"{s.model}" + (f", {s.params:,} parameters" if s.params is not None else ""))
    if s.optimizer:
        add("optimizer", optimizer_text(s))
    if s.batch_size is not None:
        add("data", data_text(s))
    options = {k: v for k, v in (s.options or {}).items() if v is not None and k not in INTERNAL_OPTIONS}
    if options:
        add("options", pairs(options))
    add("metrics", metrics_text(s))
    if s.message:
        add("message", s.message)
    lines += checkpoint_lines(d)
    return "\n".join(lines) + "\n"


def pairs(values: dict) -> str:
    return "  ".join(f"{k}={_value(v)}" for k, v in values.items())


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if not isinstance(value, str) else value


def optimizer_text(s: RunState) -> str:
    groups = s.optimizer_groups or []
    text = s.optimizer or NA
    for i, group in enumerate(groups):
        text += ("  " if i == 0 else f"  · group {i}: ") + pairs(group)
    return text + f"  · scheduler {s.scheduler or 'none'}"


def data_text(s: RunState) -> str:
    processes = f"{s.nproc} process{'es' if (s.nproc or 1) > 1 else ''}"
    per_epoch = f" · {s.steps_per_epoch} steps/epoch" if s.steps_per_epoch else ""
    accum = f" × accum {s.accum}" if s.accum and s.accum > 1 else ""
    return f"batch {s.batch_size}{accum} × {processes}{per_epoch} · {na(s.data)}"


def metrics_text(s: RunState) -> str:
    total = f"/{s.total_steps}" if s.total_steps else ""
    best = min((loss for _, loss in s.losses), default=None)
    parts = [f"step {na(s.step)}{total}", f"epoch {na(s.epoch)}", f"loss {num(s.loss)} (best {num(best)})"]
    if s.val_loss is not None or s.val_acc is not None:
        parts.append(
            f"val loss {num(s.val_loss)}" + (f", val acc {percent(s.val_acc)}" if s.val_acc is not None else "")
        )
    return " · ".join(parts)


def lineage_text(d: RunDetails) -> str:
    parts = []
    if d.state.parent_run:
        name = f" ({d.parent.name})" if d.parent is not None else ""
        parts.append(f"resumed from {d.state.parent_run}{name} at step {na(d.state.parent_step)}")
    if d.children:
        parts.append("resumed by " + ", ".join(f"{c.id} ({c.status})" for c in d.children))
    return "; ".join(parts)


def checkpoint_lines(d: RunDetails) -> list[str]:
    kept, rotated = d.checkpoints.kept, d.checkpoints.rotated
    if not kept and not rotated:
        return [f"{'checkpoints':<{LABEL}}none written"]
    gone = f" ({rotated} older rotated out by --keep-ckpts or deleted)" if rotated else ""
    lines = [f"{'checkpoints':<{LABEL}}{len(kept)} on disk{gone}"]
    for c in kept:
        command = f"%train --resume {shlex.quote(c['path'])} --name {shlex.quote(d.run.name)}"
        lines.append(f"  step {na(c['step']):>6}  {human_bytes(c['bytes']):>9}  {Path(c['path'])}")
        lines.append(f"  {'':>6}       resume: {command}")
    return lines
