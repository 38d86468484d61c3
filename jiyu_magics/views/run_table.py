"""Runs as tables (``%jobs``, ``jiyu jobs``) and one run's summary (``%job attach``)."""

from __future__ import annotations

import html
import time

from ..core.events.fold import RunSummary
from ..core.events.log import summarize
from ..core.runs.files import RunFiles
from ..core.runs.model import RunStatus
from ..core.store.run_row import Run
from ..core.text import shown
from .format import NA, bar, duration, text_table
from .status_palette import status_colour

HEADERS = ["id", "name", "kind", "status", "nproc", "gpus", "progress", "loss", "started", "duration"]
STALLED_COLOR = status_colour(RunStatus.STOPPED)  # the warning colour, as the panel's stall chip
SPARK = "▁▂▃▄▅▆▇█"


def progress_of(run: Run) -> RunSummary:
    """A run's progress summary: stored in the run row once it ended (a listing of thousands of
    finished runs reads no event log), folded from the log's tail while it runs."""
    return run.summary if run.summary is not None else summarize(RunFiles.of(run.id).events)


def row(run: Run, summary: RunSummary | None = None) -> dict:
    """One run as display strings, with its progress (``progress_of``)."""
    summary = summary if summary is not None else progress_of(run)
    step, total = summary.get("step"), summary.get("total_steps")
    progress = f"{step}/{total}" if step is not None and total else (f"step {step}" if step is not None else NA)
    return {
        "id": run.id,
        "name": run.name,
        "kind": _kind(run),
        "status": _status(run, summary),
        "nproc": str(run.nproc * run.nnodes),
        "gpus": gpus_text(run, summary),
        "progress": progress,
        "fraction": summary.get("progress"),
        "loss": _number(summary.get("loss")),
        "started": _clock(run.started),
        "duration": duration(run.duration),
    }


def _kind(run: Run) -> str:
    """Where a job runs, when a scheduler holds it (``slurm``, ``kubernetes``)."""
    return run.backend if run.backend != "local" else str(run.kind)


def _status(run: Run, summary: RunSummary) -> str:
    if run.leftovers:
        count = len(run.leftovers)
        noun = "process" if count == 1 else "processes"
        return f"{_run_status(run, summary)}, {count} leftover {noun} ({', '.join(run.leftovers)})"
    return _run_status(run, summary)


def _run_status(run: Run, summary: RunSummary) -> str:
    if run.status == RunStatus.LOST and summary.get("step") is not None:
        return f"lost at step {summary['step']}"
    if run.status == RunStatus.QUEUED and (run.queue_position or run.queue_reason):
        where = f" #{run.queue_position}" if run.queue_position else ""
        why = f" ({run.queue_reason})" if run.queue_reason else ""
        return f"queued{where}{why}"
    if run.stalled and run.stalled_since is not None:
        return f"running, stalled: {stall_text(run.stalled_since)}"
    return str(run.status)


def stall_text(since: float, now: float | None = None) -> str:
    """``no step for 12 min``: how long the step of a stalled run has stood still."""
    seconds = max(0, int((now or time.time()) - since))
    if seconds < 60:
        return f"no step for {seconds} s"
    if seconds < 3600:
        return f"no step for {seconds // 60} min"
    return f"no step for {seconds // 3600} h {seconds % 3600 // 60} min"


def gpus_text(run: Run, summary: RunSummary | None = None) -> str:
    """The GPU indices a run holds (or held); what a queued run waits for; ``cpu`` for a run
    that wants none or trained on the CPU: a kernel's CPU run (which never queues) said n/a
    where a CPU job said cpu. n/a only where it is not known."""
    held = sorted({g["index"] for g in run.gpus})
    if held:
        return ",".join(map(str, held))
    if run.status == RunStatus.QUEUED and run.gpus_requested:
        return f"{run.gpus_requested} wanted"
    device = (summary.get("device") if summary is not None else None) or ""
    if run.gpus_requested == 0 or device.startswith("cpu"):
        return "cpu"
    return NA


def _number(value) -> str:
    return NA if value is None else f"{value:.4g}"


def _clock(t: float | None) -> str:
    return NA if t is None else time.strftime("%m-%d %H:%M", time.localtime(t))


def render_text(runs: list[Run], everything: bool = False) -> str:
    if not runs:
        return "No runs." if everything else "No active runs (--all shows finished ones)."
    rows = [row(r) for r in runs]
    return text_table(HEADERS, [[r[h] for h in HEADERS] for r in rows], right={4, 7})


def page_note(listed: int, total: int) -> str:
    """The line under a paged listing: what it left out and how to see it."""
    if total <= listed:
        return ""
    return (
        f"The {listed} newest of {total} runs; --limit N shows more, --since WHEN (7d, 2026-11-01) an earlier stretch."
    )


def render_html(runs: list[Run], everything: bool = False) -> str:
    if not runs:
        return f"<p>{html.escape(render_text(runs, everything))}</p>"
    head = "".join(f"<th>{h}</th>" for h in HEADERS)
    body = "".join(_html_row(row(r)) for r in runs)
    return f'<table class="jiyu-jobs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _html_row(r: dict) -> str:
    color = STALLED_COLOR if "stalled" in r["status"] else status_colour(r["status"].split()[0])
    cells = []
    for h in HEADERS:
        text = html.escape(r[h])
        if h == "status":
            text = f'<b style="color:{color}">{text}</b>'
        elif h == "progress" and r["fraction"] is not None:
            text = f'<progress max="1" value="{r["fraction"]:.3f}"></progress> {text}'
        cells.append(f"<td><code>{text}</code></td>" if h == "id" else f"<td>{text}</td>")
    return "<tr>" + "".join(cells) + "</tr>"


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - low) / span * len(SPARK)))] for v in values)


def summary_lines(run: Run) -> list[tuple[str, str]]:
    """``%job attach``'s fields, label → value, from the run row and its event log."""
    s = progress_of(run)
    r = row(run, s)
    lines = [
        ("run", f"{run.id}  {shown(run.name)}  ({run.kind}, {run.nproc * run.nnodes} process(es))"),
        ("status", r["status"] + (f", exit code {run.exit_code}" if run.exit_code else "")),
        ("progress", f"{bar(s['progress'], 20)} {r['progress']}" if s["progress"] is not None else r["progress"]),
        ("loss", r["loss"] + (f"  {sparkline(s['losses'])}" if s["losses"] else "")),
        ("val", f"loss {_number(s['val_loss'])}, accuracy {_number(s['val_acc'])}"),
        ("throughput", NA if s["samples_per_s"] is None else f"{s['samples_per_s']:.4g} samples/s"),
        *([("scheduler", f"{run.backend} job {run.scheduler_id}")] if run.scheduler_id else []),
        ("started", _clock(run.started)),
        ("duration", r["duration"]),
        ("notebook", shown(run.notebook) if run.notebook else NA),
        ("folder", str(RunFiles.of(run.id).root)),
    ]
    error = run.error or s.get("error")
    if error:
        lines.append(("error", shown(error)))
    return lines


def render_summary_text(run: Run) -> str:
    lines = summary_lines(run)
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in lines)


def _wants(run: Run) -> str:
    if not run.gpus_requested:
        return " on the CPU" if run.gpus_requested == 0 else ""
    return f" on {run.gpus_requested} GPU(s) (queued until they are free)"


def submitted_message(run: Run, control: str, notes) -> str:
    """What a person reads right after submitting; ``control`` spells a follow-up command in
    the front-end's syntax, e.g. ``"%job {action} {id}"`` or ``"jiyu {action} {id}"``; ``notes``
    is what the submission noted (``jobs.submit_notes``: left out, warnings, scheduler handover)."""
    follow = control.format(action="logs", id=run.id) + " -f"
    stop = control.format(action="stop", id=run.id)
    if run.backend != "local":
        said, _, more = (notes.handover or "no spec written").partition("\n")
        lines = [
            f"Run {run.id} ({shown(run.name)}) for {run.backend}: {said}",
            f"Follow it: {follow}    Stop it: {stop}",
        ]
        return "\n".join(lines) + (f"\n{more}" if more else "")
    lines = [
        f"Submitted run {run.id} ({shown(run.name)}): {run.nproc * run.nnodes} process(es){_wants(run)} "
        f"from {shown(run.notebook)}",
        f"Follow it: {follow}    Stop it: {stop}",
    ]
    if notes.left_out:
        more = " …" if len(notes.left_out) > 3 else ""
        lines.append(f"Left out of the job ({len(notes.left_out)}): " + "; ".join(notes.left_out[:3]) + more)
    lines += [f"Warning: {warning}" for warning in notes.warnings]
    return "\n".join(lines)
