"""``%runs compare`` as HTML: the runs' training loss overlaid on one SVG chart (shared axes,
log scale when the losses span more than 30x, smoothed in the space shown) and the table of
parameters and final/best metrics with the differing parameters highlighted, as the panel's
Compare page shows them. Colours are JupyterLab theme variables with light fallbacks."""

from __future__ import annotations

import html
import math

from ..core.run_comparison import GROUPS, RunCurves, differing, group_of, is_internal
from .format import NA
from .loss_chart import wants_log

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 560, 240, 52, 12, 12, 24
PALETTE = [
    "var(--jp-brand-color1,#1976d2)",
    "var(--jp-warn-color1,#f57c00)",
    "var(--jp-success-color1,#388e3c)",
    "var(--jp-error-color1,#d32f2f)",
    "var(--jp-accent-color1,#7b1fa2)",
    "var(--jp-brand-color3,#90caf9)",
]
SMOOTHING = 0.6


def smooth(values: list[float], weight: float, log: bool) -> list[float]:
    """Debiased exponential moving average, in log space on a log chart."""
    to, back = (math.log10, lambda v: 10**v) if log else (float, float)
    out, average = [], 0.0
    for n, value in enumerate(values, 1):
        average = average * weight + (1 - weight) * to(value)
        out.append(back(average / (1 - weight**n)))
    return out


def compare_svg(curves: list[tuple[str, RunCurves]], by: str = "step") -> str:
    series = [(label, [(s if by == "step" else t, v) for s, t, v in c.loss]) for label, c in curves]
    points = [p for _, s in series for p in s]
    if not points:
        return "<p>No loss logged by these runs.</p>"
    ys = [v for _, v in points]
    log = wants_log(min(ys), max(ys))
    f = math.log10 if log else float
    x0, x1 = min(x for x, _ in points), max(x for x, _ in points) or 1
    y0, y1 = f(min(ys)), f(max(ys))
    sx = lambda x: LEFT + (x - x0) / ((x1 - x0) or 1) * (WIDTH - LEFT - RIGHT)  # noqa: E731
    sy = lambda v: TOP + (y1 - f(v)) / ((y1 - y0) or 1) * (HEIGHT - TOP - BOTTOM)  # noqa: E731
    lines = []
    for i, (label, s) in enumerate(series):
        smoothed = smooth([v for _, v in s], SMOOTHING, log and all(v > 0 for _, v in s))
        coords = " ".join(f"{sx(x):.1f},{sy(v):.1f}" for (x, _), v in zip(s, smoothed, strict=False))
        lines.append(
            f"<polyline class='jiyu-compare-line' data-run='{html.escape(label)}' fill='none' "
            f"style='stroke:{PALETTE[i % len(PALETTE)]}' stroke-width='2' points='{coords}'/>"
        )
    axis = (
        f"<text x='{LEFT - 4}' y='{TOP + 8}' text-anchor='end'>{max(ys):.3g}</text>"
        f"<text x='{LEFT - 4}' y='{HEIGHT - BOTTOM}' text-anchor='end'>{min(ys):.3g}</text>"
        f"<text x='{LEFT}' y='{HEIGHT - 6}'>{by} {x0:g}</text>"
        f"<text x='{WIDTH - RIGHT}' y='{HEIGHT - 6}' text-anchor='end'>{x1:g}"
        f"{' · log scale' if log else ''}</text>"
        f"<line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{HEIGHT - BOTTOM}' y2='{HEIGHT - BOTTOM}' "
        f"style='stroke:var(--jp-border-color1,#bbb)'/>"
    )
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} "
        f"{HEIGHT}' style='font:10px sans-serif;fill:var(--jp-ui-font-color1,#444)'>{axis}{''.join(lines)}</svg>"
    )


def layout(records: list[dict]) -> tuple[list[str], list[str], list[str]]:
    """The rows as Compare shows them: the tracked columns that differ (by group: parameters,
    model, optimizer, data, fit options), the metrics, and the rest (the same in every run, or
    an internal option, such as ``keep_ckpts``), which views fold away. A single run shows all
    but the internal ones."""
    marked = set(differing(records))
    columns = [c for c in dict.fromkeys(k for r in records for k in r) if c not in ("id", "name")]
    order = {name: i for i, (name, _) in enumerate(GROUPS)}
    tracked = sorted((c for c in columns if group_of(c) != "metrics"), key=lambda c: order[group_of(c)])
    if len(records) < 2:
        shown = [c for c in tracked if not is_internal(c)]
    else:
        shown = [c for c in tracked if c in marked and not is_internal(c)]
    metrics = [c for c in columns if group_of(c) == "metrics"]
    return shown, metrics, [c for c in tracked if c not in shown]


def compare_table(records: list[dict]) -> str:
    """One column per run, one row per differing parameter/option (grouped), then the
    metrics; the rows that are the same in every run in a folded section."""
    marked = set(differing(records))
    shown, metrics, folded = layout(records)
    head = "".join(
        f"<th style='border-bottom:3px solid {PALETTE[i % len(PALETTE)]}'>{html.escape(r['name'])}"
        f"<br><small>{r['id']}</small></th>"
        for i, r in enumerate(records)
    )

    def row(c: str) -> str:
        style = (
            " class='jiyu-differs' style='font-weight:bold;box-shadow:inset 4px 0 var(--jp-warn-color1,#f57c00)'"
            if c in marked
            else ""
        )
        cells = "".join(f"<td>{html.escape(_shown(r.get(c)))}</td>" for r in records)
        return (
            f"<tr{style} data-row='{html.escape(c)}'><th style='text-align:left;padding-left:8px'>"
            f"{html.escape(c)}</th>{cells}</tr>"
        )

    body = "".join(map(row, shown + metrics))
    table = f"<table class='jiyu-compare'><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>"
    if not folded:
        return table
    same = "".join(map(row, folded))
    return (
        f"{table}<details class='jiyu-compare-same'><summary>Same in every run, and internal options "
        f"({len(folded)})</summary><table class='jiyu-compare'><tbody>{same}</tbody></table></details>"
    )


def compare_html(records: list[dict], curves: dict[str, RunCurves]) -> str:
    labelled = [(f"{r['name']} ({r['id']})", curves[r["id"]]) for r in records]
    return f"<div class='jiyu-compare-view'>{compare_svg(labelled)}{compare_table(records)}</div>"


def compare_text(records: list[dict]) -> str:
    """The table as text: a header of names and ids, the differing rows (marked ``*``) under
    their group, the metrics, then one line per group of what is the same in every run."""
    marked = set(differing(records))
    shown, metrics, folded = layout(records)
    width = max([len(c) for c in shown + metrics] + [8]) + 2
    cells = [[_shown(r.get(c)) for r in records] for c in shown + metrics]
    widths = [max([len(r["name"]), len(r["id"])] + [len(row[i]) for row in cells]) for i, r in enumerate(records)]

    def line(label: str, values: list[str], mark: str = " ") -> str:
        return f"{mark} {label:<{width}}" + "  ".join(f"{v:<{w}}" for v, w in zip(values, widths, strict=True))

    lines = [line("", [r["name"] for r in records]), line("", [r["id"] for r in records])]
    group = None
    for c, values in zip(shown + metrics, cells, strict=True):
        if group_of(c) != group:
            group = group_of(c)
            lines.append(group)
        lines.append(line(c, values, "*" if c in marked else " "))
    same = [c for c in folded if not is_internal(c) or c in marked]
    if same:
        lines.append("same in every run: " + ", ".join(f"{c}={_shown(records[0].get(c))}" for c in same))
    return "\n".join(line.rstrip() for line in lines)


def _shown(value) -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
