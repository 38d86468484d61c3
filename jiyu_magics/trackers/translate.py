"""A run's events as a tracker reads them: scalars with their steps, parameters, tags, status.

Pure (no tracker imported): each sink (``sinks.tensorboard``, ``sinks.mlflow``) writes what
``Translation`` gathered from a stretch of the log through its own library's API. One table
(``STEP_SCALARS``, ``VAL_SCALARS``) names every scalar once, so TensorBoard and MLflow show the
same keys, and the guide lists them from here.

A run holding several ``fit`` calls (a notebook job with two ``%%train`` cells) keeps the first
call's name unprefixed and puts a call of another name under ``<name>/``; a call that resumes
(``start_step`` > 0: ``--resume``, a torchrun restart, a requeued Slurm attempt) continues the
series, and tells TensorBoard to drop the points the earlier attempt logged after the
checkpoint it resumed from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.runs.model import EventKind, RunStatus

MIB = 1024 * 1024

# event field -> (key, scale)
STEP_SCALARS: dict[str, tuple[str, float]] = {
    "loss": ("train/loss", 1.0),
    "lr": ("train/lr", 1.0),
    "grad_norm": ("train/grad_norm", 1.0),
    "epoch": ("train/epoch", 1.0),
    "samples_per_s": ("perf/samples_per_s", 1.0),
    "data_wait": ("perf/data_wait", 1.0),
    "mem_alloc": ("gpu/mem_alloc_mib", 1 / MIB),
    "mem_reserved": ("gpu/mem_reserved_mib", 1 / MIB),
    "mem_peak": ("gpu/mem_peak_mib", 1 / MIB),
}
VAL_SCALARS: dict[str, tuple[str, float]] = {"loss": ("val/loss", 1.0), "accuracy": ("val/accuracy", 1.0)}
ELAPSED_KEY = "run/elapsed_s"
# start event field -> parameter name: how the call trained, as resolved (``amp auto`` -> bf16)
START_PARAMS = (
    "epochs",
    "total_steps",
    "steps_per_epoch",
    "batch_size",
    "accum",
    "amp",
    "device",
    "nproc",
    "strategy",
    "backend",
    "data",
    "resumed_from",
)
PARAM_PREFIX = "fit."
MODEL_PARAMS = "fit.model_parameters"  # the start event's ``params``: a count, not the run's parameters


Param = str | int | float | bool


@dataclass(frozen=True)
class Point:
    key: str
    value: float
    step: int
    t: float  # unix time of the event


@dataclass(frozen=True)
class Resume:
    """A call resumed from a checkpoint at ``step - 1``: what an earlier attempt logged from
    ``step`` on was overtaken (TensorBoard drops it: its ``SessionLog.START`` purge)."""

    step: int
    t: float


@dataclass
class Translation:
    """What a stretch of events asks of a tracker, in order of arrival."""

    points: list[Point | Resume] = field(default_factory=list)  # in log order
    params: dict[str, Param] = field(default_factory=dict)
    status: RunStatus | None = None  # the newest end event's; RUNNING again after a new start
    started: bool = False  # a start event was in the stretch
    end_time: float | None = None  # the newest end event's time

    @property
    def scalars(self) -> list[Point]:
        return [point for point in self.points if isinstance(point, Point)]


class Translator:
    """Turns one run's events into ``Translation``s, stretch by stretch: it remembers the call
    it is in (for prefixes and the step of a ``val``) across stretches."""

    def __init__(self) -> None:
        self.first_name: str | None = None
        self.prefix = ""
        self.step = 0
        self.calls = 0

    def feed(self, events: Iterable[dict]) -> Translation:
        out = Translation()
        for event in events:
            kind = event.get("kind")
            if kind == EventKind.START:
                self._start(event, out)
            elif kind == EventKind.STEP:
                self._scalars(event, STEP_SCALARS, out)
            elif kind == EventKind.VAL:
                self._scalars(event, VAL_SCALARS, out)
            elif kind == EventKind.END:
                self._end(event, out)
        return out

    def _start(self, event: dict, out: Translation) -> None:
        name = event.get("name")
        self.calls += 1
        if self.first_name is None:
            self.first_name = name
        self.prefix = "" if name == self.first_name or not name else f"{name}/"
        self.step = int(event.get("start_step") or 0)
        if self.step > 0:
            out.points.append(Resume(self.step + 1, float(event.get("t") or 0.0)))
        out.started, out.status = True, RunStatus.RUNNING
        if self.calls == 1:
            out.params.update(start_params(event))

    def _scalars(self, event: dict, table: dict[str, tuple[str, float]], out: Translation) -> None:
        step = event.get("step")
        step = self.step if step is None else int(step)
        self.step = step
        t = float(event.get("t") or 0.0)
        for name, (key, scale) in table.items():
            value = event.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.points.append(Point(self.prefix + key, float(value) * scale, step, t))

    def _end(self, event: dict, out: Translation) -> None:
        try:
            out.status = RunStatus(event.get("status") or RunStatus.SUCCEEDED)
        except ValueError:
            out.status = RunStatus.FAILED
        step = event.get("step")
        out.end_time = float(event.get("t") or 0.0) or None
        if isinstance(event.get("elapsed"), (int, float)):
            at = self.step if step is None else int(step)
            out.points.append(Point(self.prefix + ELAPSED_KEY, float(event["elapsed"]), at, float(event.get("t") or 0)))


def start_params(event: dict) -> dict[str, Param]:
    """The first call's settings as parameters (``fit.amp``: bf16, as it resolved), every fit
    option it recorded (``fit.log_every``), the model's, optimizer's and scheduler's classes
    (``fit.optimizer``: AdamW) and the optimizer's hyperparameters (``optimizer.lr``; per group,
    ``optimizer.group1.lr``, when it has several)."""
    found = {PARAM_PREFIX + key: _scalar(event[key]) for key in START_PARAMS if event.get(key) is not None}
    if event.get("params") is not None:
        found[MODEL_PARAMS] = _scalar(event["params"])
    for key, value in (event.get("options") or {}).items():
        if value is not None:
            found.setdefault(PARAM_PREFIX + str(key), _scalar(value))
    for key in ("model", "optimizer", "scheduler"):
        if event.get(key) is not None:
            found[PARAM_PREFIX + key] = _scalar(event[key])
    groups = event.get("optimizer_groups") or []
    for index, group in enumerate(groups):
        prefix = "optimizer." if len(groups) == 1 else f"optimizer.group{index}."
        found.update({prefix + str(k): _scalar(v) for k, v in group.items() if v is not None})
    return found


def record_params(params: dict) -> dict[str, Param]:
    """The run's parameters as its record holds them (``-p`` values of a job; a kernel run's
    ``fit`` options) as tracker parameters: scalars, one level, None left out."""
    found: dict[str, Param] = {}
    for key, value in (params or {}).items():
        if isinstance(value, dict):
            found.update({f"{key}.{k}": _scalar(v) for k, v in value.items() if v is not None})
        elif value is not None:
            found[str(key)] = _scalar(value)
    return found


def _scalar(value: object) -> Param:
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def as_text(value: Param) -> str:
    """A parameter as MLflow stores it (strings only): ``3e-4`` stays ``0.0003``, True ``True``."""
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


# How a jiyu status reads in MLflow (``RunStatus`` names there).
MLFLOW_STATUS = {
    RunStatus.QUEUED: "SCHEDULED",
    RunStatus.RUNNING: "RUNNING",
    RunStatus.SUCCEEDED: "FINISHED",
    RunStatus.FAILED: "FAILED",
    RunStatus.STOPPED: "KILLED",
    RunStatus.LOST: "FAILED",
}
