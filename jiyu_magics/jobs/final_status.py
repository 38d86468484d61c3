"""The one rule for how a launched run ended, and what its end adds to the event log.

Four facts decide it: torchrun's exit code, whether anyone asked for a stop, whether a rank
says it ended because of that stop, and what rank 0's engine said in its last ``end`` event. A
clean exit means the ranks ended as they chose: a rank that ended its script early for a stop
makes the run ``stopped`` (a stopped job exits 0 and runs no further cell), else rank 0's word
counts (a stop that crossed the last step still succeeded; a stop the engine honoured says
``stopped``). A non-zero exit after a stop request is the stop's own doing; without one it is
a failure, told by the first failing rank.

A stopped run's line says where it stopped and how to go on: "stopped at step 120 by request;
checkpoint .../step-00000120.pt; resume with %train --resume .../step-00000120.pt --name digits".

Rank 0's word comes from the one event fold in ``core`` (``RunState.fit_end_status``: the end
the engine wrote for its last ``fit``, never one an owner appended).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from ..core.events.fold import RunState
from ..core.runs.model import EventKind, RunStatus
from ..core.runs.states import ended_as

OWNER_SOURCE = "lifecycle"  # marks the events the run's owner wrote, not rank 0
OWNER_SOURCES = (OWNER_SOURCE, "supervisor")  # "supervisor": logs written before the lifecycle existed
STOPPED_BY_REQUEST = "stopped by request"
STOPPED_BEFORE_START = "stopped before it started"


@dataclass(frozen=True)
class Outcome:
    status: RunStatus
    exit_code: int | None  # torchrun's; None when it never ran (or nobody saw it exit)
    error: str | None  # one line: the first failing rank's error, or why it stopped


def fit_end_status(events: Iterable[dict]) -> RunStatus | None:
    """How rank 0's engine ended its last ``fit`` (a notebook job fits once per ``%%train``
    cell): None when that fit never ended (its ranks were killed) or no fit ran at all."""
    return RunState.of(events).fit_end_status


def final_status(
    exit_code: int | None, stop_requested: bool, events: Iterable[dict], ranks_stopped: bool = False
) -> RunStatus:
    if exit_code == 0:
        if ranks_stopped:
            return RunStatus.STOPPED
        said = fit_end_status(events)
        return RunStatus(said) if said in (RunStatus.SUCCEEDED, RunStatus.STOPPED) else RunStatus.SUCCEEDED
    return ended_as(RunStatus.FAILED, stop_requested)


def decide(
    exit_code: int | None,
    stop_requested: bool,
    events: list[dict],
    error_line: str | None,
    started: bool = True,
    ranks_stopped: bool = False,
    name: str | None = None,
) -> Outcome:
    """The outcome with its one line: ``error_line`` (the first failing rank's error, or the
    owner's own failure) for a failure, where it stopped for a stop, nothing for a success."""
    status = final_status(exit_code, stop_requested, events, ranks_stopped)
    if status is RunStatus.FAILED:
        error = error_line or (
            f"torchrun exited with code {exit_code}" if exit_code is not None else RunStatus.FAILED.value
        )
    elif status is RunStatus.STOPPED:
        error = stop_line(events, name) if started else STOPPED_BEFORE_START
    else:
        error = None
    return Outcome(status, exit_code, error)


def stop_line(events: Iterable[dict], name: str | None = None) -> str:
    """Where a stopped run stopped, its checkpoint and the command that continues from it,
    read from the event fold; "stopped by request" when no training call had started.
    ``name`` (the run store's) names the run when its ``start`` event does not."""
    state = RunState.of(events)
    if state.status is None:
        return STOPPED_BY_REQUEST
    finished = state.fit_end_status is RunStatus.SUCCEEDED
    where = (
        f"stopped by request after training finished at step {state.step}"
        if finished
        else f"stopped at step {state.step} by request"
    )
    if not state.checkpoint:
        return f"{where}; no checkpoint was saved"
    # the run's name too, as the run page's command has it: the resumed run lists under the same name
    named = state.name or name
    name_option = f" --name {shlex.quote(named)}" if named else ""
    resume = f"%train --resume {shlex.quote(state.checkpoint)}{name_option}"
    return f"{where}; checkpoint {state.checkpoint}; resume with {resume}"


def closing_events(events: list[dict], outcome: Outcome) -> list[tuple[str, dict]]:
    """What the owner appends so the log ends as the run did: the failure's line as an
    ``error`` (unless rank 0 already wrote that very line), and an ``end`` unless rank 0's
    last fit already ended with the final status and nothing said otherwise after it (a
    listing that took the run for lost a moment before its owner recorded it)."""
    added: list[tuple[str, dict]] = []
    errors = [e for e in events if e.get("kind") == EventKind.ERROR]
    if outcome.status is RunStatus.FAILED and (not errors or errors[-1].get("message") != outcome.error):
        added.append((EventKind.ERROR.value, {"message": outcome.error, "source": OWNER_SOURCE}))
    state = RunState.of(events)
    if added or state.fit_end_status != outcome.status or state.status != outcome.status:
        added.append(
            (
                EventKind.END.value,
                {
                    "status": outcome.status.value,
                    "exit_code": outcome.exit_code,
                    "message": outcome.error,
                    "source": OWNER_SOURCE,
                },
            )
        )
    return added
