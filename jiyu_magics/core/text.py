"""Text from outside (file names, run names, scheduler reasons, error messages) on its way to a
terminal, a table, a script comment or a batch file: one line of printable characters.

A file may be named ``inj\\nprint("INJECTED")\\n#.ipynb``, or carry bytes that are not UTF-8
(Latin-1 ``caf\\xe9.ipynb``: Python reads them as lone surrogates, which neither SQLite nor a
UTF-8 terminal accepts). ``shown`` escapes what would forge a line or move the cursor;
``utf8_path`` refuses a path that cannot be stored or shown at all.
"""

from __future__ import annotations

import os
import re

# Terminal control sequences (ECMA-48): CSI (colours, ``\x1b[0;31m``), OSC (titles, links, ended by
# BEL or ST) and the two-character escapes. IPython colours a rank's traceback, tqdm moves the
# cursor: a log shown as text keeps their words and drops the codes.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|(?![\[\]])[0-~])")
ANSI_CUT = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?)?\Z")  # a sequence the text ends inside


class BadPath(ValueError):
    """A path jiyu cannot keep (not UTF-8); ``str()`` is one line."""


def shown(text: object) -> str:
    """``text`` as one printable line: control characters (newline, escape, ...) and bytes
    that were not UTF-8 written as Python escapes (``\\n``, ``\\x1b``, ``\\udce9``)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def utf8_path(path: str | os.PathLike, what: str = "file") -> str:
    """The path as text, when it is valid UTF-8; ``BadPath`` naming it with escapes otherwise."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadPath(f"the {what} name {shown(text)} is not valid UTF-8; rename it (e.g. with convmv)") from None
    return text


def bounded(text: str, head: int = 4096, tail: int = 4096) -> str:
    """``text`` with its middle left out when it is longer than ``head + tail`` characters:
    a 300 KB exception message keeps its start (the type, what failed) and its end (often the
    line that says why), and says how much it left out."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]} … [{len(text) - head - tail} characters left out] … {text[-tail:]}"


def without_ansi(text: str) -> str:
    """``text`` without its terminal colour and cursor codes (a log read as text, not played
    on a terminal: ``jiyu logs``, the panel's Logs)."""
    return ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


def ansi_cut(text: str) -> int | None:
    """Where ``text`` ends inside an escape sequence (a chunk of a growing log cut there), so
    a reader can hold that tail back for the next chunk; None when it does not."""
    found = ANSI_CUT.search(text, max(0, len(text) - 512)) if "\x1b" in text[-512:] else None
    return found.start() if found else None
