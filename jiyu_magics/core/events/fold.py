"""A run's state, folded from its event stream: the one reading of the event log.

Everything that interprets events derives from this fold, so no two of them can disagree: the
summary every list view shows (``event_log.summarize``: REST, the panel, ``jiyu jobs``,
``/metrics``), the live training views (``views.training_view.TrainingView`` adds only what
drawing needs), ``FitResult.from_events``, the first error a failing rank reports, and the rule
that decides a launch's final status (``end_status``, ``first_error``).

A ``start`` event begins a new ``fit`` call (a run may hold several): everything that describes
a call (curve, counters, checkpoints, errors, how it ended) restarts from it. What a viewer
knew of the run before any ``start`` (its id, name and process count, from the run store) is
kept when the ``start`` does not say.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

from ..runs.model import EventKind, RunStatus
from .schema import FIELDS, KINDS
from .tracked import brief

START_FIELDS = tuple(FIELDS[EventKind.START])
STEP_FIELDS = tuple(FIELDS[EventKind.STEP])
IDENTITY_FIELDS = ("run_id", "name", "nproc")
COUNTERS = ("version", "skipped")  # about the stream, not the call: never reset
HISTORY_KEYS = ("step", "epoch", "loss", "val_loss", "val_acc", "lr", "samples_per_s")
SPARKLINE_POINTS = 60


class RunSummary(TypedDict):
    """A run's latest progress as every list view shows it (REST ``summary``, ``jiyu jobs``,
    ``/metrics``); the panel's ``RunSummary`` is generated from it."""

    total_steps: int | None
    step: int | None
    epoch: int | None
    loss: float | None
    lr: float | None
    samples_per_s: float | None
    val_loss: float | None
    val_acc: float | None
    mem_peak: float | None
    updated: float | None  # time of the newest event
    step_at: float | None  # when the step last moved (the time of its step event)
    end_status: RunStatus | None  # how the current call ended; None while it runs
    error: str | None  # the current call's first error, across ranks
    losses: list[float]  # the newest training losses, for a sparkline
    progress: float | None  # step / total_steps, 0..1
    parent_run: str | None  # the run this call resumed from (its checkpoint's), or None
    parent_step: int | None  # the step of that checkpoint
    device: str | None  # what the call trained on (cpu, cuda:0), as its start says
    # what Compare records of the call but its fit options (``events.tracked.brief``): the
    # parameters cell, model, optimizer hyperparameters, data; what tells runs of a name apart
    tracked: dict[str, Any] | None


ADDED_KEYS = ("parent_run", "parent_step", "device", "tracked")  # since summaries were first stored


def complete(summary: RunSummary) -> RunSummary:
    """A stored summary with the keys added since it was stored (as "not known")."""
    missing = [key for key in ADDED_KEYS if key not in summary]
    return summary if not missing else RunSummary(**{**summary, **dict.fromkeys(missing)})  # type: ignore[typeddict-item]


@dataclass
class RunState:
    # the current fit call, as its start event describes it
    run_id: str | None = None
    name: str | None = None
    total_steps: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    nproc: int | None = None
    batch_size: int | None = None
    accum: int | None = None
    amp: str | None = None
    device: str | None = None
    params: int | None = None
    strategy: str | None = None
    backend: str | None = None
    data: str | None = None
    start_step: int | None = None
    resumed_from: str | None = None
    from_notebook: str | None = None  # what %%train took from the notebook, not its cell
    stall_timeout: float | None = None  # the call's own (None: the job's default or the rule)
    track: str | None = None  # the trackers the call asked for (``trackers.destinations``)
    model: str | None = None  # what a tracker records (train.run_facts): the model's class,
    optimizer: str | None = None  # the optimizer's,
    optimizer_groups: list | None = None  # its hyperparameters per parameter group,
    scheduler: str | None = None  # the scheduler's class,
    config: dict | None = None  # the notebook's parameters (or fit(config=)),
    options: dict | None = None  # and every fit option of the call
    parent_run: str | None = None  # resumed: the run that wrote the checkpoint,
    parent_step: int | None = None  # at this step
    # its progress, from the newest step event
    step: int | None = None
    step_at: float | None = None  # when the step last moved: the ``t`` of the step event that moved it
    epoch: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples_per_s: float | None = None
    mem_alloc: float | None = None
    mem_reserved: float | None = None
    mem_peak: float | None = None
    data_wait: float | None = None
    grad_norm: float | None = None
    elapsed: float | None = None
    eta: float | None = None
    val_loss: float | None = None
    val_acc: float | None = None
    # the curves: points of events that name their step (``null`` is "not known": no point)
    losses: list[tuple[int, float]] = field(default_factory=list)  # (step, loss)
    vals: list[tuple[int, float | None, float | None]] = field(default_factory=list)  # (step, loss, acc)
    history: list[dict] | None = None  # rows as fit returns them; kept only when asked for
    checkpoints: list[str] = field(default_factory=list)  # oldest first
    advice: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # error events
    status: RunStatus | None = None  # None before the first start, running, then how it ended
    fit_end_status: RunStatus | None = None  # how the engine itself ended the call (its end has no source)
    message: str | None = None  # the end event's
    updated: float | None = None
    version: int = 0  # events folded: readers redo their work only when it moved
    skipped: int = 0  # what was not an event (garbage lines the readers dropped)

    @classmethod
    def of(cls, events: Iterable[dict], history: bool = False) -> RunState:
        """The state after ``events``; ``history`` keeps one row per logged step (``fit``'s
        result needs them; a dashboard following a three-day job does not)."""
        state = cls(history=[] if history else None)
        state.feed(events)
        return state

    def feed(self, events: Iterable[dict]) -> bool:
        """Folds ``events`` in order; returns whether the state changed. A reader's list brings
        the count of lines it skipped; anything here that is not an event object is skipped
        and counted too, and kinds nothing is read from (gpu, stall) change nothing."""
        before = self.version
        self.skipped += getattr(events, "skipped", 0)
        for event in events:
            if not isinstance(event, dict) or event.get("kind") not in KINDS:
                self.skipped += 1
                continue
            handler = getattr(self, f"_on_{event['kind']}", None)
            if handler is not None:
                handler(event)
                self.updated = event.get("t", self.updated)
                self.version += 1
        return self.version != before

    # -- one handler per kind -------------------------------------------------------------------
    def _on_start(self, event: dict) -> None:
        known = {key: getattr(self, key) for key in IDENTITY_FIELDS}
        fresh = type(self)()
        for each in fields(self):
            if each.name not in COUNTERS and each.name != "history":
                setattr(self, each.name, getattr(fresh, each.name))
        if self.history is not None:
            self.history = []
        for key in START_FIELDS:
            setattr(self, key, event.get(key, known.get(key)))
        self.step, self.status = event.get("start_step") or 0, RunStatus.RUNNING

    def _on_step(self, event: dict) -> None:
        if event.get("step") is not None and event["step"] != self.step:
            self.step_at = event.get("t", self.step_at)
        for key in STEP_FIELDS:
            if event.get(key) is not None:
                setattr(self, key, event[key])
        if event.get("loss") is not None and event.get("step") is not None:  # a point of the curve
            self.losses.append((event["step"], event["loss"]))
        self._add_history(event)

    def _on_val(self, event: dict) -> None:
        self.val_loss, self.val_acc = event.get("loss"), event.get("accuracy")
        if event.get("step") is not None:  # a point of the curve
            self.vals.append((event["step"], self.val_loss, self.val_acc))
        self._add_history(event)

    def _on_ckpt(self, event: dict) -> None:
        if event.get("path"):
            self.checkpoints.append(event["path"])

    def _on_advice(self, event: dict) -> None:
        if event.get("message") and event["message"] not in self.advice:
            self.advice.append(event["message"])

    def _on_error(self, event: dict) -> None:
        self.errors.append(event)

    def _on_end(self, event: dict) -> None:
        self.status = RunStatus(event.get("status") or RunStatus.SUCCEEDED)
        if event.get("source") is None:  # not one its launcher appended (supervisor, lifecycle)
            self.fit_end_status = self.status
        self.message = event.get("message")
        self.step = event.get("step", self.step)
        self.elapsed = event.get("elapsed", self.elapsed)
        if event.get("samples_per_s") is not None:  # the call's own, over its wall time
            self.samples_per_s = event["samples_per_s"]
        self.eta = None

    def _add_history(self, event: dict) -> None:
        if self.history is not None:
            add_to_history(self.history, event)

    # -- what readers ask -------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.status is not None and self.status.final

    @property
    def end_status(self) -> RunStatus | None:
        """How the current call ended, as its last ``end`` event says, whoever wrote it (a
        job's launcher may add one after the engine's); None while it runs. The engine's own
        word, which the final status rule weighs, is ``fit_end_status``."""
        return self.status if self.finished else None

    @property
    def checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def first_error(self) -> str | None:
        """The earliest error of the current call by time, not by line (ranks append at the
        same time): when rank 1 raises, rank 0 fails next with "connection closed by peer",
        and the user should read rank 1's message. Named by rank when there are several."""
        if not self.errors:
            return None
        first = min(self.errors, key=lambda e: e.get("t") or 0.0)
        rank, message = first.get("rank"), first.get("message")
        several = (self.nproc or 1) > 1 or bool(rank)
        return f"rank {rank}: {message}" if rank is not None and several else message

    @property
    def progress(self) -> float | None:
        if not self.total_steps or self.step is None:
            return None
        return min(1.0, self.step / self.total_steps)

    def summary(self, sparkline_points: int = SPARKLINE_POINTS) -> RunSummary:
        return RunSummary(
            total_steps=self.total_steps,
            step=self.step,
            epoch=self.epoch,
            loss=self.loss,
            lr=self.lr,
            samples_per_s=self.samples_per_s,
            val_loss=self.val_loss,
            val_acc=self.val_acc,
            mem_peak=self.mem_peak,
            updated=self.updated,
            step_at=self.step_at,
            end_status=self.end_status,
            error=self.first_error,
            losses=[loss for _, loss in self.losses[-sparkline_points:]],
            progress=self.progress,
            parent_run=self.parent_run,
            parent_step=self.parent_step,
            device=self.device,
            tracked=brief({key: getattr(self, key) for key in START_FIELDS}) if self.status is not None else None,
        )


def add_to_history(history: list[dict], event: dict) -> None:
    """One row per logged step; a validation at the step of the last row joins that row."""
    kind = event.get("kind")
    if kind == EventKind.STEP:
        history.append({k: event.get(k) for k in HISTORY_KEYS})
    elif kind == EventKind.VAL:
        row = history[-1] if history and history[-1]["step"] == event.get("step") else None
        if row is None:
            row = {k: None for k in HISTORY_KEYS} | {"step": event.get("step"), "epoch": event.get("epoch")}
            history.append(row)
        row["val_loss"], row["val_acc"] = event.get("loss"), event.get("accuracy")
