"""What ``fit`` returns: the history, the run, the checkpoints and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field

HISTORY_KEYS = ("step", "epoch", "loss", "val_loss", "val_acc", "lr", "samples_per_s")


@dataclass
class FitResult:
    run_id: str
    status: str                      # succeeded | stopped | failed
    message: str
    step: int = 0
    epoch: int = 0
    total_steps: int | None = None
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)   # paths on disk, oldest first

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
    def from_events(cls, run_id: str, events: list[dict], status: str, message: str | None = None) -> "FitResult":
        """The result of a ``fit`` another process ran (``%%train --nproc``'s rank 0), from
        its events since its last ``start``."""
        start = max((i for i, e in enumerate(events) if e.get("kind") == "start"), default=0)
        result = cls(run_id=run_id, status=status, message=message or "")
        for event in events[start:]:
            kind = event.get("kind")
            add_to_history(result.history, event)
            if kind == "start":
                result.total_steps = event.get("total_steps")
            elif kind == "step":
                result.step, result.epoch = event.get("step", result.step), event.get("epoch", result.epoch)
                result.elapsed = event.get("elapsed", result.elapsed)
            elif kind == "ckpt" and event.get("path"):
                result.checkpoints.append(event["path"])
            elif kind == "end":
                result.step = event.get("step", result.step)
                result.elapsed = event.get("elapsed", result.elapsed)
                result.message = message or event.get("message") or result.message
        return result


def add_to_history(history: list[dict], event: dict) -> None:
    """One row per logged step; a validation at the step of the last row joins that row."""
    kind = event.get("kind")
    if kind == "step":
        history.append({k: event.get(k) for k in HISTORY_KEYS})
    elif kind == "val":
        row = history[-1] if history and history[-1]["step"] == event.get("step") else None
        if row is None:
            row = {k: None for k in HISTORY_KEYS} | {"step": event.get("step"), "epoch": event.get("epoch")}
            history.append(row)
        row["val_loss"], row["val_acc"] = event.get("loss"), event.get("accuracy")
