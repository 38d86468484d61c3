"""One rule for run names, whichever door they come through (``%%train --name``, ``%submit
--name``, ``jiyu submit``, the REST API): one line of printable text, at most ``MAX_LENGTH``
characters. A name is shown in tables and terminals and written into batch scripts and
manifests, so a newline or an escape code in it would forge lines there.
"""

from __future__ import annotations

import re

MAX_LENGTH = 200
_UNSAFE_FOR_SCHEDULERS = re.compile(r"[^A-Za-z0-9._-]+")


class BadRunName(ValueError):
    """The name breaks the rule; ``str()`` is one line saying why."""


def check_run_name(name: object) -> str | None:
    """The name, stripped; None for no name (the caller picks a default)."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise BadRunName(f"a run name must be text, got {type(name).__name__}")
    stripped = name.strip()
    if len(stripped) > MAX_LENGTH:
        raise BadRunName(f"a run name may have at most {MAX_LENGTH} characters, got {len(stripped)}")
    if not stripped.isprintable():
        raise BadRunName(f"a run name must be one line of printable text, got {name!r}")
    return stripped or None


def name_from(text: str) -> str:
    """A default name made from a file name or a class name, following the rule: characters
    that are not printable (a newline, an escape, a byte that was not UTF-8) become ``?``,
    and the name is cut to ``MAX_LENGTH``."""
    cleaned = "".join(c if c.isprintable() else "?" for c in text).strip()[:MAX_LENGTH].strip()
    return cleaned or "run"


def scheduler_slug(name: str, limit: int = 63) -> str:
    """The name as schedulers and Kubernetes accept it in job names and labels (letters,
    digits, ``.``, ``_``, ``-``)."""
    return _UNSAFE_FOR_SCHEDULERS.sub("-", name).strip("-._")[:limit] or "run"
