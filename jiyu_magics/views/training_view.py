"""What every training view draws: a run's folded state plus what only drawing needs.

The in-kernel dashboard, the text progress lines, a dashboard tailing another process's
``events.jsonl`` (``%job attach``, ``%%train --nproc``) and the final PNG all read this one
model, fed the same event dicts, so they cannot disagree. The fold itself (a ``start`` begins
a new ``fit`` call, the first error across ranks, how the call ended) is ``core.run_state``'s;
this adds the GPU utilisation the dashboard samples, a status word for before the first
``start``, and the smoothed curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.events.fold import RunState

SMOOTHING_SPANS = 15.0
WAITING = "waiting"  # shown before the first start event: not a run status


@dataclass
class TrainingView(RunState):
    gpu_util: int | None = None  # from NVML, filled by the dashboard when present
    fit_name: str | None = None  # the call's own run name, where a viewer titles it by its job's (%job attach)
    tracking: list[str] | None = None  # where its trackers hold it (``trackers.where``), filled by the viewer

    def elapsed_at(self, now: float) -> float | None:
        """The call's wall time at ``now`` (unix time): the last step's ``elapsed`` plus the time
        since that step while the call runs, so a stalled run's clock goes on where its steps stop."""
        if self.elapsed is None or self.finished:
            return self.elapsed
        since = self.step_at if self.step_at is not None else self.updated
        return self.elapsed + max(0.0, now - since) if since is not None else self.elapsed

    @property
    def status_text(self) -> str:
        return str(self.status) if self.status is not None else WAITING

    def smoothed(self, spans: float = SMOOTHING_SPANS, log: bool = False) -> list[float]:
        """The train loss through an exponential moving average whose time constant is a
        fixed share of the steps shown (1/``spans``): logged points are unevenly spaced in
        steps (the log interval adapts), so the decay is per step, not per point.

        ``log``: averaged in log space, as a log-scale chart shows it; a linear mean of a
        spiky loss is dominated by its spikes and sits far above the curve there."""
        if not self.losses:
            return []
        log = log and all(v is not None and v > 0 for _, v in self.losses)
        to, back = (math.log, math.exp) if log else (float, float)
        tau = max(1.0, (self.losses[-1][0] - self.losses[0][0]) / spans)
        out, average, previous = [], to(self.losses[0][1]), self.losses[0][0]
        for step, value in self.losses:
            average += (1 - math.exp(-(step - previous) / tau)) * (to(value) - average)
            previous = step
            out.append(back(average))
        return out
