"""The two ways training ends badly, kept apart because they are shown differently.

``TrainConfigError`` is bad input (no optimizer for the model, an empty loader, ``epochs=-1``):
the user fixes a call, so ``%%train`` shows it as a one-line ``UsageError``. ``TrainingFailed``
is a run that started and could not go on (NaN loss, out of memory): it carries the partial
result, and IPython shows its message in one line instead of a traceback through the engine.
"""

from __future__ import annotations


class TrainConfigError(ValueError):
    """A problem with the objects or options given to ``fit``; nothing was trained."""


class TrainingFailed(RuntimeError):
    """Training stopped on a failure it explains (NaN/Inf loss, out of memory).

    ``result`` is the partial :class:`~jiyu_magics.train.fit_result.FitResult` (status ``failed``)
    with the history so far and the last good checkpoint.
    """

    def __init__(self, result):
        super().__init__(result.message)
        self.result = result

    def _render_traceback_(self) -> list[str]:
        """IPython's hook for exceptions that render themselves: one line, no engine frames."""
        return [f"TrainingFailed: {self}"]


class NonFiniteLoss(ArithmeticError):
    """Raised inside the loop when a logged loss is NaN or infinite, or (``what="weights"``)
    when the weights are, found before a checkpoint would have saved them."""

    def __init__(self, step: int, value: float, what: str = "loss"):
        super().__init__(f"{what} became {value} at step {step}")
        self.step = step
        self.value = value
        self.what = what
