"""The live loss curve as an inline SVG string: drawn by the browser, built in about a
millisecond in Python. Gridlines and text take JupyterLab's theme variables (with light
fallbacks where there is no theme, e.g. a saved notebook on a website), so a dark theme reads.

Why not matplotlib for the live view: a full redraw of a 1000-point, 2-line plot to PNG costs
~100 ms on these CPUs, 10% of wall time at a 1 s refresh in the training thread. Building this
SVG costs ~1 ms (``benchmarks/train_overhead.py`` measures both); matplotlib draws the final
PNG once (``loss_plot.py``).
"""

from __future__ import annotations

import math

from .training_view import TrainingView

WIDTH, HEIGHT = 440, 200
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 14, 22
MAX_POINTS = 400
RAW, SMOOTH, VAL = "#90caf9", "#1565c0", "#e65100"
LOG_SPAN = 30  # losses spanning more than this ratio are drawn on a log scale (live SVG and final PNG)


SCALES = ("auto", "log", "linear")


def wants_log(low: float, high: float, scale: str = "auto") -> bool:
    """``auto``: log when the losses span more than LOG_SPAN; ``log`` wherever all are positive."""
    if scale == "linear" or low <= 0:
        return False
    return scale == "log" or high / low > LOG_SPAN


def loss_svg(view: TrainingView, width: int = WIDTH, height: int = HEIGHT, scale: str = "auto") -> str:
    raw = [(s, v) for s, v in view.losses if v is not None and math.isfinite(v)]
    vals = [(s, v) for s, v, _ in view.vals if v is not None and math.isfinite(v)]
    if not raw and not vals:
        return _frame(
            width,
            height,
            "<text x='50%' y='50%' text-anchor='middle' style='fill:var(--jp-ui-font-color2,#888)'>waiting for the "
            "first logged step…</text>",
        )
    steps = [s for s, _ in raw + vals]
    values = [v for _, v in raw + vals]
    axes = _Scale(min(steps), max(steps), min(values), max(values), width, height, scale)
    smooth = list(zip((s for s, _ in view.losses), view.smoothed(log=axes.log), strict=False))  # in the space shown
    body = [
        _grid(axes),
        _polyline(_thin(raw), axes, RAW, 1),
        _polyline(_thin(smooth), axes, SMOOTH, 2),
        *(f"<circle cx='{axes.x(s):.1f}' cy='{axes.y(v):.1f}' r='3' fill='{VAL}'/>" for s, v in vals),
        _legend(width, bool(vals)),
    ]
    return _frame(width, height, "".join(body))


class _Scale:
    def __init__(self, x0: float, x1: float, y0: float, y1: float, width: int, height: int, scale: str = "auto"):
        self.log = wants_log(y0, y1, scale)
        f = math.log10 if self.log else (lambda v: v)
        self.fy = f
        self.x0, self.x1 = x0, x1 if x1 > x0 else x0 + 1
        lo, hi = f(y0), f(y1)
        pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
        self.y0, self.y1 = lo - pad, hi + pad
        self.width, self.height = width, height

    def x(self, step: float) -> float:
        return LEFT + (step - self.x0) / (self.x1 - self.x0) * (self.width - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return TOP + (self.y1 - self.fy(value)) / (self.y1 - self.y0) * (self.height - TOP - BOTTOM)

    def ticks(self) -> list[float]:
        """Round values inside the visible range: 1-2-5 steps, or decades (with 2s and 5s when
        the range spans less than two) on a log scale, where a range too narrow for three of
        those (a loss from 2.4 down to 0.93: 1 and 2 alone) gets the round linear values."""
        if not self.log:
            return _linear_ticks(self.y0, self.y1)
        low, high = 10**self.y0, 10**self.y1
        decades = _log_ticks(low, high)
        return decades if len(decades) >= 3 else [t for t in _linear_ticks(low, high) if t > 0]


def _linear_ticks(low: float, high: float, wanted: int = 4) -> list[float]:
    raw = (high - low) / wanted
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _log_ticks(low: float, high: float) -> list[float]:
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    multiples = (1,) if math.log10(high / low) >= 2.5 else (1, 2, 5)
    return [m * 10.0**d for d in decades for m in multiples if low <= m * 10.0**d <= high]


def _thin(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most MAX_POINTS, evenly strided, always keeping the newest point."""
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / MAX_POINTS
    kept = [points[int(i * stride)] for i in range(MAX_POINTS - 1)]
    return kept + [points[-1]]


def _polyline(points, scale: _Scale, colour: str, width: float) -> str:
    if not points:
        return ""
    coords = " ".join(f"{scale.x(s):.1f},{scale.y(v):.1f}" for s, v in points)
    return f"<polyline fill='none' stroke='{colour}' stroke-width='{width}' points='{coords}'/>"


def _grid(scale: _Scale) -> str:
    parts = []
    right = scale.width - RIGHT
    for value in scale.ticks():
        y = scale.y(value)
        parts.append(
            f"<line x1='{LEFT}' x2='{right}' y1='{y:.1f}' y2='{y:.1f}' style='stroke:var(--jp-border-color2,#eee)'/>"
            f"<text x='{LEFT - 4}' y='{y + 4:.1f}' text-anchor='end'>{value:.3g}</text>"
        )
    base = scale.height - BOTTOM
    parts.append(
        f"<line x1='{LEFT}' x2='{right}' y1='{base}' y2='{base}' style='stroke:var(--jp-border-color1,#bbb)'/>"
        f"<text x='{LEFT}' y='{scale.height - 6}'>step {scale.x0:g}</text>"
        f"<text x='{right}' y='{scale.height - 6}' text-anchor='end'>{scale.x1:g}</text>"
    )
    if scale.log:
        parts.append(f"<text x='{LEFT + 4}' y='{TOP - 3}' style='fill:var(--jp-ui-font-color2,#888)'>log scale</text>")
    return "".join(parts)


def _legend(width: int, with_val: bool) -> str:
    items = [(RAW, "train"), (SMOOTH, "smoothed")] + ([(VAL, "val")] if with_val else [])
    widths = [16 + 6 * len(text) for _, text in items]  # swatch + about 6 px per character at 10 px
    x = width - RIGHT - sum(widths)
    parts = []
    for (colour, text), w in zip(items, widths, strict=False):
        parts.append(
            f"<rect x='{x}' y='3' width='10' height='4' fill='{colour}'/><text x='{x + 13}' y='9'>{text}</text>"
        )
        x += w
    return "".join(parts)


def _frame(width: int, height: int, body: str) -> str:
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' style='font:10px sans-serif;fill:var(--jp-ui-font-color1,#444)'>{body}</svg>"
    )
