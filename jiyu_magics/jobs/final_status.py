"""The one rule for how a launched run ended, and what its end adds to the event log.

Three facts decide it: torchrun's exit code, whether anyone asked for a stop, and what rank 0's
engine said in its last ``end`` event. A clean exit means the ranks finished as they chose, so
rank 0's word counts (a stop that crossed the last step still succeeded; a stop the engine
honoured says ``stopped``). A non-zero exit after a stop request is the stop's own doing
(SIGTERM makes torchrun exit 1); without one it is a failure, told by the first failing rank.

Rank 0's word comes from the one event fold in ``core`` (``RunState.fit_end_status``: the end
the engine wrote for its last ``fit``, never one an owner appended).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..core.run_model import EventKind, RunStatus
from ..core.run_state import RunState

OWNER_SOURCE = "lifecycle"  # marks the events the run's owner wrote, not rank 0
OWNER_SOURCES = (OWNER_SOURCE, "supervisor")  # "supervisor": logs written before the lifecycle existed
STOPPED_BY_REQUEST = "stopped by request"
STOPPED_BEFORE_START = "stopped before it started"


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    exit_code: int | None    # torchrun's; None when it never ran (or nobody saw it exit)
    error: str | None        # one line: the first failing rank's error, or why it stopped


def fit_end_status(events: Iterable[dict]) -> RunStatus | None:
    """How rank 0's engine ended its last ``fit`` (a notebook job fits once per ``%%train``
    cell): None when that fit never ended (its ranks were killed) or no fit ran at all."""
    return RunState.of(events).fit_end_status


def final_status(exit_code: int | None, stop_requested: bool, events: Iterable[dict]) -> RunStatus:
    if exit_code == 0:
        said = fit_end_status(events)
        return RunStatus(said) if said in (RunStatus.SUCCEEDED, RunStatus.STOPPED) else RunStatus.SUCCEEDED
    return RunStatus.STOPPED if stop_requested else RunStatus.FAILED


def decide(exit_code: int | None, stop_requested: bool, events: list[dict], error_line: str | None,
           started: bool = True) -> Outcome:
    """The outcome with its one line: ``error_line`` (the first failing rank's error, or the
    owner's own failure) for a failure, the reason for a stop, nothing for a success."""
    status = final_status(exit_code, stop_requested, events)
    if status is RunStatus.FAILED:
        error = error_line or (f"torchrun exited with code {exit_code}" if exit_code is not None else "failed")
    elif status is RunStatus.STOPPED:
        error = STOPPED_BY_REQUEST if started else STOPPED_BEFORE_START
    else:
        error = None
    return Outcome(status, exit_code, error)


def closing_events(events: list[dict], outcome: Outcome) -> list[tuple[str, dict]]:
    """What the owner appends so the log ends as the run did: the failure's line as an
    ``error`` (unless rank 0 already wrote that very line), and an ``end`` unless rank 0's
    last fit already ended with the final status."""
    added: list[tuple[str, dict]] = []
    errors = [e for e in events if e.get("kind") == EventKind.ERROR]
    if outcome.status is RunStatus.FAILED and (not errors or errors[-1].get("message") != outcome.error):
        added.append((EventKind.ERROR.value, {"message": outcome.error, "source": OWNER_SOURCE}))
    if added or fit_end_status(events) != outcome.status:
        added.append((EventKind.END.value, {"status": outcome.status.value, "exit_code": outcome.exit_code,
                                            "message": outcome.error, "source": OWNER_SOURCE}))
    return added
