"""Whether a tracker's library is installed, asked where ``--track`` is typed: a module spec
lookup, no import (``import mlflow`` takes seconds), so a missing extra is one line with the pip
command before anything starts."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from .destinations import Destination, TrackSpecError

EXTRAS = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # destination kind -> module and extra


def missing_extra(kind: str) -> str | None:
    """The one line to show when ``kind``'s library is not installed here, else None."""
    module = EXTRAS[kind]
    try:
        found = importlib.util.find_spec(module) is not None
    except ValueError:  # a module whose spec was taken away (sys.modules[name] = None)
        found = False
    return None if found else f"tracking to {kind} needs the {module} package: pip install 'jiyu-magics[{module}]'"


def check_installed(destinations: Iterable[Destination]) -> None:
    """Raises ``TrackSpecError`` with the pip command when a destination's library is missing."""
    for destination in destinations:
        line = missing_extra(destination.kind)
        if line:
            raise TrackSpecError(line)
