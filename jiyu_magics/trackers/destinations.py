"""Where a run is tracked: ``--track tensorboard[:DIR]``, ``--track mlflow[:URI]``, or both.

One parser for every front-end (``%%train``/``fit``, ``%submit``, ``jiyu submit``, the REST
POST, ``jiyu track``): a value is a comma-separated list, and a repeated flag adds to it. Each
destination is resolved here, in the process that parses it, to an absolute form (a relative
``DIR`` is relative to the caller's folder, not to the detached supervisor's), and travels as
its canonical string (``tensorboard:/abs/dir``, ``mlflow:sqlite:////abs/mlflow.db``).

Defaults: ``tensorboard`` alone writes under ``$JIYU_HOME/tensorboard``; ``mlflow`` alone goes
to ``$MLFLOW_TRACKING_URI`` when set (MLflow's own convention), else to an SQLite store
``$JIYU_HOME/mlflow.db`` (MLflow refuses its file store from 3.13 unless told). Where a run
gives no ``--track``, ``$JIYU_TRACK`` decides, else the ``track:`` key of
``$JIYU_HOME/config.yaml``; ``none`` turns a default off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core.runs.files import jiyu_home
from ..core.settings import Settings

KINDS = ("tensorboard", "mlflow")
CONFIG_FILE = "config.yaml"
OFF = ("none", "off")
DEFAULT_EXPERIMENT = "jiyu"
SYNTAX = "tensorboard[:DIR] or mlflow[:URI]"


class TrackSpecError(ValueError):
    """A ``--track`` value that names no destination; ``str()`` is the one line to show."""


@dataclass(frozen=True)
class Destination:
    kind: str  # tensorboard | mlflow
    target: str  # an absolute folder (tensorboard) or a tracking URI (mlflow)

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}"

    @property
    def label(self) -> str:
        """How the user reads it in a line: ``TensorBoard (/home/me/tb)``."""
        return f"{'TensorBoard' if self.kind == 'tensorboard' else 'MLflow'} ({self.target})"


def parse_track(values: str | Iterable[str] | None, cwd: Path | str | None = None) -> list[Destination]:
    """The destinations ``values`` names (one string or several, each a comma list), in order,
    without repeats; ``none`` alone is an empty list. Raises ``TrackSpecError`` in one line."""
    if values is None:
        return []
    words = [word.strip() for value in ([values] if isinstance(values, str) else values) for word in value.split(",")]
    words = [word for word in words if word]
    if any(word.lower() in OFF for word in words):
        if len(words) > 1:
            raise TrackSpecError(f"tracker {','.join(words)!r}: 'none' cannot go with a tracker")
        return []
    found: list[Destination] = []
    for word in words:
        destination = _one(word, Path(cwd) if cwd is not None else Path.cwd())
        if destination not in found:
            found.append(destination)
    return found


def _one(word: str, cwd: Path) -> Destination:
    kind, _, target = word.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise TrackSpecError(f"tracker {word!r}: expected {SYNTAX}")
    target = target.strip()
    if kind == "tensorboard":
        folder = Path(target).expanduser() if target else jiyu_home() / "tensorboard"
        return Destination(kind, str(folder if folder.is_absolute() else (cwd / folder).resolve()))
    return Destination(kind, _mlflow_uri(target, cwd) if target else default_mlflow_uri())


def default_mlflow_uri() -> str:
    return Settings.from_environ().mlflow_uri or f"sqlite:///{jiyu_home() / 'mlflow.db'}"


def _mlflow_uri(target: str, cwd: Path) -> str:
    """A URI as given (``http://host:5000``, ``databricks``...), an SQLite URI with its path
    made absolute, or a path to a ``.db`` file as the SQLite URI of it."""
    if target.startswith("sqlite:///"):
        path = Path(target[len("sqlite:///") :]).expanduser()
        return f"sqlite:///{path if path.is_absolute() else (cwd / path).resolve()}"
    if "://" in target or target == "databricks":
        return target
    if target.endswith((".db", ".sqlite")):
        path = Path(target).expanduser()
        return f"sqlite:///{path if path.is_absolute() else (cwd / path).resolve()}"
    raise TrackSpecError(
        f"tracker 'mlflow:{target}': expected a tracking URI (sqlite:///PATH.db, http://HOST:PORT) or a .db file"
    )


def default_track(variable: str | None = None) -> list[Destination]:
    """The destinations of a run that named none: ``variable`` (``$JIYU_TRACK`` as the caller's
    entry point read it), else ``track:`` in ``$JIYU_HOME/config.yaml``, else none. A bad
    default is an error where it is used."""
    if variable is not None:
        return parse_track(variable)
    return parse_track(_configured())


def _configured() -> str | list[str] | None:
    path = jiyu_home() / CONFIG_FILE
    if not path.is_file():
        return None
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise TrackSpecError(f"{path}: cannot be read ({error})") from None
    value = config.get("track") if isinstance(config, dict) else None
    if value is not None and not isinstance(value, (str, list)):
        raise TrackSpecError(f"{path}: track: expected {SYNTAX}, or a list of them")
    return value


def as_strings(destinations: Iterable[Destination]) -> list[str]:
    return [str(destination) for destination in destinations]


def experiment_name() -> str:
    """The MLflow experiment runs go into: ``$MLFLOW_EXPERIMENT_NAME`` (MLflow's own), else ``jiyu``."""
    return Settings.from_environ().mlflow_experiment or DEFAULT_EXPERIMENT
