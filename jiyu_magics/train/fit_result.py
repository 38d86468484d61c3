"""What ``fit`` returns: the history, the run, the checkpoints and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.events.fold import RunState
from ..core.runs.model import RunStatus


@dataclass
class FitResult:
    run_id: str
    status: RunStatus  # succeeded | stopped | failed
    message: str
    step: int = 0  # optimizer steps; after a NaN/Inf loss, the step where it went bad
    epoch: int = 0
    total_steps: int | None = None
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)  # paths on disk, oldest first

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def final_loss(self) -> float | None:
        return next((row["loss"] for row in reversed(self.history) if row.get("loss") is not None), None)

    @property
    def val_acc(self) -> float | None:
        return next((row["val_acc"] for row in reversed(self.history) if row.get("val_acc") is not None), None)

    def __repr__(self) -> str:
        return f"<FitResult {self.status} run={self.run_id} step={self.step}: {self.message}>"

    @classmethod
    def from_events(
        cls, run_id: str, events: list[dict], status: RunStatus | str, message: str | None = None
    ) -> FitResult:
        """The result of a ``fit`` another process ran (``%%train --nproc``'s rank 0), from
        its events since its last ``start``."""
        state = RunState.of(events, history=True)
        return cls(
            run_id=run_id,
            status=RunStatus(status),
            message=message or state.message or "",
            step=state.step or 0,
            epoch=state.epoch or 0,
            total_steps=state.total_steps,
            elapsed=state.elapsed or 0.0,
            history=state.history or [],  # kept: RunState.of(history=True)
            checkpoints=state.checkpoints,
        )
