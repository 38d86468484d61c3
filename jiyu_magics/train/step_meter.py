"""Per-step numbers kept on the device and read once per log interval.

Each step only appends the detached loss tensor (and, when clipping, the gradient norm) to a
list: no ``.item()``, no device-to-host sync, no extra kernel. At log time one ``stack`` +
``tolist`` reads them all, finds the first non-finite loss exactly, and one collective per
reduction combines the ranks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from .process_group import DistContext

NO_BAD_STEP = 1e18  # stands for "no non-finite loss" in the MAX reduction of -step


@dataclass
class Window:
    """What happened since the previous log, combined over ranks."""

    steps: int
    loss: float | None
    first_bad_step: int | None
    bad_value: float | None
    samples_per_s: float | None
    samples: float  # every rank's samples in the window
    elapsed: float
    data_wait: float | None  # share of wall time spent waiting for the next batch
    grad_norm: float | None
    mem_alloc: int | None
    mem_reserved: int | None
    mem_peak: int | None
    stop: bool  # some rank was asked to stop


class StepMeter:
    def __init__(self, device: torch.device):
        self.device = device
        self.reset(time.perf_counter(), 0)

    def reset(self, now: float, step: int) -> None:
        self.losses: list[torch.Tensor] = []
        self.loss_steps: list[int] = []  # the optimizer step of each loss, when accumulating
        self.norms: list[torch.Tensor] = []
        self.samples = 0
        self.data_wait = 0.0
        self.started = now
        self.first_step = step

    def read(self, dist: DistContext, step: int, stop: bool) -> Window:
        now = time.perf_counter()
        losses = torch.stack(self.losses).float().tolist() if self.losses else []
        norms = torch.stack(self.norms).float().tolist() if self.norms else []
        steps = self.loss_steps or range(self.first_step + 1, self.first_step + 1 + len(losses))  # accum 1: a step each
        bad = next(((s, v) for s, v in zip(steps, losses, strict=False) if not math.isfinite(v)), None)
        elapsed = max(now - self.started, 1e-9)
        sums = dist.reduce(
            [
                sum(v for v in losses if math.isfinite(v)),
                sum(map(math.isfinite, losses)),
                self.samples,
                self.data_wait / elapsed,
                elapsed,
                sum(norms),
                len(norms),
            ],
            "sum",
            self.device,
        )
        maxima = dist.reduce([-(bad[0] if bad else NO_BAD_STEP), float(stop), *self._memory()], "max", self.device)
        window = self._window(step, sums, maxima, bad, dist.world_size)
        self.reset(time.perf_counter(), step)
        return window

    def _window(self, step, sums, maxima, bad, world) -> Window:
        loss_sum, loss_count, samples, wait_share, elapsed, norm_sum, norm_count = sums
        first_bad = -maxima[0]
        elapsed /= world
        memory = [int(m) if m >= 0 else None for m in maxima[2:]]
        return Window(
            steps=step - self.first_step,
            loss=loss_sum / loss_count if loss_count else None,
            first_bad_step=int(first_bad) if first_bad < NO_BAD_STEP else None,
            bad_value=bad[1] if bad else (math.nan if first_bad < NO_BAD_STEP else None),
            samples_per_s=samples / elapsed if elapsed else None,
            samples=samples,
            elapsed=elapsed,
            data_wait=wait_share / world,
            grad_norm=norm_sum / norm_count if norm_count else None,
            mem_alloc=memory[0],
            mem_reserved=memory[1],
            mem_peak=memory[2],
            stop=bool(maxima[1]),
        )

    def _memory(self) -> list[float]:
        if self.device.type != "cuda":
            return [-1.0, -1.0, -1.0]
        return [
            float(torch.cuda.memory_allocated(self.device)),
            float(torch.cuda.memory_reserved(self.device)),
            float(torch.cuda.max_memory_allocated(self.device)),
        ]


class LogClock:
    """How many optimizer steps until the next log: a fixed ``log_every``, or about every
    ``interval_s`` of wall time. The adaptive schedule starts at 1 step (early feedback) and
    grows at most 4x per log; it only uses values every rank agrees on (the reduced elapsed
    time), so all ranks log, and so reduce, at the same steps."""

    def __init__(self, log_every: int | None, interval_s: float, max_steps: int = 10_000):
        self.fixed, self.interval_s, self.max_steps = log_every, interval_s, max_steps
        self.every = log_every or 1

    def next(self, window: Window) -> int:
        if self.fixed:
            return self.fixed
        if window.steps > 0:
            wanted = round(window.steps * self.interval_s / max(window.elapsed, 1e-6))
            self.every = max(1, min(wanted, 4 * window.steps, self.max_steps))
        return self.every
