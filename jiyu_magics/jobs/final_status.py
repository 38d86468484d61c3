"""The one rule for how a launched run ended, and what its end adds to the event log.

Three facts decide it: torchrun's exit code, whether anyone asked for a stop, and what rank 0's
engine said in its last ``end`` event. A clean exit means the ranks finished as they chose, so
rank 0's word counts (a stop that crossed the last step still succeeded; a stop the engine
honoured says ``stopped``). A non-zero exit after a stop request is the stop's own doing
(SIGTERM makes torchrun exit 1); without one it is a failure, told by the first failing rank.

The event reading lives in :func:`last_fit_end` alone, so it can later come from the event
fold in ``core`` without touching the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..core.run_model import EventKind, RunStatus

OWNER_SOURCE = "lifecycle"  # marks the events the run's owner wrote, not rank 0
OWNER_SOURCES = (OWNER_SOURCE, "supervisor")  # "supervisor": logs written before the lifecycle existed
STOPPED_BY_REQUEST = "stopped by request"
STOPPED_BEFORE_START = "stopped before it started"


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    exit_code: int | None    # torchrun's; None when it never ran (or nobody saw it exit)
    error: str | None        # one line: the first failing rank's error, or why it stopped


def last_fit_end(events: Iterable[dict]) -> dict | None:
    """Rank 0's ``end`` event of its last ``fit`` (a notebook job fits once per ``%%train``
    cell): None when that fit never ended (its ranks were killed) or no fit ran at all."""
    end = None
    for event in events:
        kind = event.get("kind")
        if kind == EventKind.START:
            end = None
        elif kind == EventKind.END and event.get("source") not in OWNER_SOURCES:
            end = event
    return end


def final_status(exit_code: int | None, stop_requested: bool, events: Iterable[dict]) -> RunStatus:
    if exit_code == 0:
        said = (last_fit_end(events) or {}).get("status")
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
    ended = last_fit_end(events)
    if added or ended is None or ended.get("status") != outcome.status:
        added.append((EventKind.END.value, {"status": outcome.status.value, "exit_code": outcome.exit_code,
                                            "message": outcome.error, "source": OWNER_SOURCE}))
    return added
