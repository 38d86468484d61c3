"""Small formatting helpers every table uses: one spelling of "n/a", of bytes, of durations."""

from __future__ import annotations

from collections.abc import Collection

from ..core.text import shown

NA = "n/a"


def na(value, fmt: str = "{}") -> str:
    return NA if value is None else fmt.format(value)


def gib(n: int | float | None) -> str:
    return NA if n is None else f"{n / 2**30:.1f}"


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return NA
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return NA


def duration(seconds: float | None) -> str:
    if seconds is None:
        return NA
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def text_table(headers: list[str], rows: list[list[str]], right: Collection[int] = frozenset()) -> str:
    """An aligned plain-text table; columns in ``right`` are right-aligned (numbers). Each cell
    is one printable line (``core.text.shown``): a name with a newline or an escape code
    cannot forge rows or move the cursor."""
    headers = [shown(h) for h in headers]
    rows = [[shown(c) for c in r] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        parts = [
            str(c).rjust(w) if i in right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def bar(fraction: float | None, width: int = 10) -> str:
    if fraction is None:
        return " " * width
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "#" * filled + "." * (width - filled)
