"""Training progress as text (progress lines, headers) and the final summary in text and HTML;
``widgets.text_progress`` prints the lines live where widgets cannot render."""

from __future__ import annotations

import html
import math

from .format import duration, human_bytes, na
from .status_palette import status_colour
from .training_view import TrainingView

TEXT_INTERVAL_S = 10.0


def num(value: float | None, digits: int = 4) -> str:
    return na(None if value is None or not math.isfinite(value) else f"{value:.{digits}g}")


def percent(value: float | None) -> str:
    return na(None if value is None else f"{value:.1%}")


def steps_text(view: TrainingView) -> str:
    total = f"/{view.total_steps}" if view.total_steps else ""
    share = f" ({view.progress:.0%})" if view.progress is not None else ""
    return f"step {na(view.step)}{total}{share}"


def epoch_text(view: TrainingView) -> str:
    return f"epoch {na(view.epoch)}" + (f"/{view.epochs}" if view.epochs else "")


def memory_text(view: TrainingView) -> str | None:
    if view.mem_alloc is None:
        return None
    return (
        f"{human_bytes(view.mem_alloc)} alloc / {human_bytes(view.mem_reserved)} reserved "
        f"· peak {human_bytes(view.mem_peak)}"
    )


def stat_rows(view: TrainingView) -> list[tuple[str, str]]:
    """(label, value) pairs every rendering shows, in order."""
    rows = [("epoch", epoch_text(view).split(" ", 1)[1]), ("loss", num(view.loss))]
    if view.vals or view.val_loss is not None:  # no validation: no rows that would only say n/a
        rows.append(("val loss", num(view.val_loss)))
    if view.val_acc is not None or any(acc is not None for *_, acc in view.vals):
        rows.append(("val acc", percent(view.val_acc)))
    rows += [
        ("samples/s", na(None if view.samples_per_s is None else f"{view.samples_per_s:,.0f}")),
        ("lr", na(None if view.lr is None else f"{view.lr:.3g}")),
    ]
    memory = memory_text(view)
    if memory:
        rows.append(("GPU memory", memory))
    if view.gpu_util is not None:
        rows.append(("GPU util", f"{view.gpu_util}%"))
    if view.data_wait is not None:
        rows.append(("data wait", f"{view.data_wait:.0%}"))
    return rows


def progress_line(view: TrainingView) -> str:
    parts = [steps_text(view), epoch_text(view), f"loss {num(view.loss)}"]
    if view.val_loss is not None:
        parts.append(f"val {num(view.val_loss)}" + (f" / {percent(view.val_acc)}" if view.val_acc is not None else ""))
    if view.samples_per_s is not None:
        parts.append(f"{view.samples_per_s:,.0f} samples/s")
    if view.lr is not None:
        parts.append(f"lr {view.lr:.3g}")
    if view.mem_peak is not None:
        parts.append(f"mem peak {human_bytes(view.mem_peak)}")
    if view.eta is not None and not view.finished:
        parts.append(f"ETA {duration(view.eta)}")
    return " · ".join(parts)


def header_text(view: TrainingView) -> str:
    strategy = f" ({view.strategy})" if view.strategy else ""
    procs = f"{view.nproc} processes{strategy}" if view.nproc and view.nproc > 1 else "1 process"
    return (
        f"run {na(view.run_id)} · {na(view.name)} · {na(view.device)} · amp {na(view.amp)} · {procs}"
        f" · batch {na(view.batch_size)}"
        + (f" × accum {view.accum}" if view.accum and view.accum > 1 else "")
        + (f" · {view.from_notebook}" if view.from_notebook else "")
    )


def tracking_lines(view: TrainingView) -> list[str]:
    """Where ``--track`` sent the run: ``tracked in TensorBoard: ...``, one line a tracker."""
    return [f"tracked in {place}" for place in view.tracking or []]


def summary_text(view: TrainingView) -> str:
    lines = [header_text(view), progress_line(view)]
    if view.message:
        lines.append(view.message)
    error = view.first_error
    if error and error not in (view.message or ""):
        lines.append(f"error: {error}")
    return "\n".join(lines + tracking_lines(view))


def summary_html(view: TrainingView, png_base64: str | None = None, svg: str | None = None) -> str:
    """The static output left in the notebook when training ends: it survives export and
    re-opening without a kernel, unlike a widget. ``svg`` (the live chart, in the theme's
    colours) is shown in place of the PNG where given; the PNG then travels beside it in the
    output bundle for exporters that take images only. The table wraps under the chart in a
    narrow output."""
    rows = "".join(
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in stat_rows(view)
    )
    image = svg or (
        f"<img alt='loss curve' style='max-width:100%' src='data:image/png;base64,{png_base64}'/>" if png_base64 else ""
    )
    colour = status_colour(view.status)
    tracked = "".join(f"<div class='jiyu-tracked'>{html.escape(line)}</div>" for line in tracking_lines(view))
    return (
        f"<div class='jiyu-train-summary'><div><b style='color:{colour}'>{html.escape(view.status_text)}</b> · "
        f"{html.escape(header_text(view))}</div><div>{html.escape(view.message or '')}</div>"
        f"<div style='display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start'>{image}"
        f"<table style='font-size:90%'>{rows}</table></div>{tracked}</div>"
    )
