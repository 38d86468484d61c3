"""A stop request to the job this process runs in, and the rule that a stopped job ends.

A job's ranks learn of a stop by SIGTERM: the stop procedure sends it to each rank process
(``jobs.process.process_tree.stop_run``), and Linux sends it when a rank's torchrun agent dies.
During ``fit`` the engine turns it into a stop at a step boundary with a checkpoint and returns
``stopped``; outside ``fit`` the rank's entry point ends the script at once. Either way the job
ends there: no later cell runs and no later ``fit`` starts, so nothing trains, checkpoints or
reports after the stop. The one fact lives here, in a module every layer may import, because
the engine (``train``), the rank entry point and the exported script (``jobs``) must agree on
it without importing each other.

It is per process and set only by a launched process's signal handlers: a notebook kernel
never notes a stop here (its Stop button and interrupts stop one ``fit``, not the kernel).
Which rank the process is (only rank 0 says the stop) is told here by the entry points that
read their launcher's context (the rank's entry point, ``fit``), never read from the environment.
"""

from __future__ import annotations

_reason: str | None = None
_speaks = True  # rank 0 of its job, or no rank at all: it says the stop's one line


class JobStopped(SystemExit):
    """Ends a stopped job's script cleanly. Exit status 0, so that torchrun neither reports a
    failure (a 40-line traceback) nor restarts the workers under ``--max-restarts``; the run's
    owner still knows it stopped (the rank records it, the stop request is in the run row).
    ``message`` is the one line rank 0 prints, or None."""

    def __init__(self, message: str | None = None):
        super().__init__(0)
        self.message = message


def note(reason: str) -> None:
    """Records that this process's job was asked to stop (the first reason stays)."""
    global _reason
    if _reason is None:
        _reason = reason


def speak_as(rank: int | None) -> None:
    """This process is ``rank`` of its job (None: outside torchrun): only rank 0 says a stop."""
    global _speaks
    _speaks = rank in (None, 0)


def noted() -> str | None:
    """Why this process's job was asked to stop, or None."""
    return _reason


def forget() -> None:
    """Clears the note (a test process that simulated a stop)."""
    global _reason
    _reason = None


def stop_now(reason: str) -> JobStopped:
    """What a launched process raises when a stop reaches it outside ``fit``: the job ends
    where it is, cleanly."""
    note(reason)
    return JobStopped(_say(f"stopped by {reason}"))


def not_started() -> JobStopped:
    """What a rank raises when its run was asked to stop before the rank started."""
    return JobStopped(_say("not started: the job was asked to stop"))


def stop_point(where: str) -> None:
    """Called by an exported job script before each cell: a stopped job ends here."""
    if _reason is not None:
        raise JobStopped(_say(f"{where} and the cells after it were not run: the job was asked to stop"))


def refuse_training(what: str = "training") -> None:
    """Called when a ``fit`` starts: in a stopped job it does not start, the job ends."""
    if _reason is not None:
        raise JobStopped(_say(f"{what} not started: the job was asked to stop"))


def _say(text: str) -> str | None:
    """One line, from rank 0 only (every rank ends the same way)."""
    return f"[jiyu] {text}" if _speaks else None
