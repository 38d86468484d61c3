"""A training run's state, folded from its events: what every training view draws.

The in-kernel dashboard, the text progress lines, a dashboard tailing another process's
``events.jsonl`` (``%job attach``, ``%%train --nproc``) and the final PNG all read this one
model, fed the same event dicts, so they cannot disagree. A ``start`` event begins a new
``fit`` call (a run may hold several): the curve and counters restart from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

START_FIELDS = ("run_id", "name", "total_steps", "epochs", "steps_per_epoch", "nproc", "batch_size", "accum",
                "amp", "device", "params", "strategy", "data", "start_step", "resumed_from")
IDENTITY_FIELDS = ("run_id", "name", "nproc")
STEP_FIELDS = ("step", "epoch", "loss", "lr", "samples_per_s", "mem_alloc", "mem_reserved", "mem_peak",
               "data_wait", "grad_norm", "elapsed", "eta")
SMOOTHING_SPANS = 15.0


@dataclass
class TrainingView:
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
    data: str | None = None
    start_step: int | None = None
    resumed_from: str | None = None
    step: int | None = None
    epoch: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples_per_s: float | None = None
    mem_alloc: int | None = None
    mem_reserved: int | None = None
    mem_peak: int | None = None
    data_wait: float | None = None
    grad_norm: float | None = None
    elapsed: float | None = None
    eta: float | None = None
    gpu_util: int | None = None          # from NVML, filled by the dashboard when present
    val_loss: float | None = None
    val_acc: float | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)
    vals: list[tuple[int, float | None, float | None]] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    checkpoint: str | None = None
    status: str = "waiting"              # waiting | running | succeeded | stopped | failed
    message: str | None = None
    error: str | None = None
    updated: float | None = None
    version: int = 0                     # bumped on every change: views redraw only when it moved

    def feed(self, events: Iterable[dict]) -> bool:
        before = self.version
        for event in events:
            handler = getattr(self, f"_on_{event.get('kind')}", None)
            if handler is not None:
                handler(event)
                self.updated = event.get("t", self.updated)
                self.version += 1
        return self.version != before

    def _on_start(self, event: dict) -> None:
        known = {key: getattr(self, key) for key in IDENTITY_FIELDS}  # from the run store, if a viewer set them
        fresh = TrainingView()
        for name in fresh.__dataclass_fields__:
            if name != "version":
                setattr(self, name, getattr(fresh, name))
        for key in START_FIELDS:
            setattr(self, key, event.get(key, known.get(key)))
        self.step, self.status = event.get("start_step") or 0, "running"

    def _on_step(self, event: dict) -> None:
        for key in STEP_FIELDS:
            if event.get(key) is not None:
                setattr(self, key, event[key])
        if event.get("loss") is not None:
            self.losses.append((event["step"], event["loss"]))

    def _on_val(self, event: dict) -> None:
        self.val_loss, self.val_acc = event.get("loss"), event.get("accuracy")
        self.vals.append((event.get("step"), self.val_loss, self.val_acc))

    def _on_ckpt(self, event: dict) -> None:
        self.checkpoint = event.get("path")

    def _on_advice(self, event: dict) -> None:
        if event.get("message") and event["message"] not in self.advice:
            self.advice.append(event["message"])

    def _on_error(self, event: dict) -> None:
        rank = event.get("rank")
        self.error = f"rank {rank}: {event.get('message')}" if rank else event.get("message")

    def _on_end(self, event: dict) -> None:
        self.status = event.get("status") or "succeeded"
        self.message = event.get("message")
        self.step = event.get("step", self.step)
        self.elapsed = event.get("elapsed", self.elapsed)
        self.eta = None

    @property
    def finished(self) -> bool:
        return self.status in ("succeeded", "stopped", "failed")

    @property
    def progress(self) -> float | None:
        if not self.total_steps or self.step is None:
            return None
        return min(1.0, self.step / self.total_steps)

    def smoothed(self, spans: float = SMOOTHING_SPANS) -> list[float]:
        """The train loss through an exponential moving average whose time constant is a
        fixed share of the steps shown (1/``spans``): logged points are unevenly spaced in
        steps (the log interval adapts), so the decay is per step, not per point."""
        if not self.losses:
            return []
        tau = max(1.0, (self.losses[-1][0] - self.losses[0][0]) / spans)
        out, average, previous = [], self.losses[0][1], self.losses[0][0]
        for step, value in self.losses:
            average += (1 - math.exp(-(step - previous) / tau)) * (value - average)
            previous = step
            out.append(average)
        return out
