"""Background jobs: a notebook exported to a script and run by ``torchrun`` under a detached
supervisor, tracked in the run store. No torch, IPython, ipywidgets or tornado imports here:
the server, the CLI and the magics all call these functions.

    from jiyu_magics import jobs
    run = jobs.submit("train.ipynb", nproc=2, params={"lr": 3e-4})
    jobs.stop(run.id)

Launchers hand a run to ``RunLifecycle`` (its one owner: start, follow, stop, final status,
record); runs a scheduler holds (Slurm, Kubernetes) are followed by the host's scheduler
follower. Listings and ``resolve`` only read; ``upkeep`` is the explicit step in which run
owners record what the readers derive (lost runs) and keep the follower running. Built on
``export_notebook`` / ``export_history`` (the exporter) and ``Launch`` (torchrun as a child
process group with per-rank status and a verified stop).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each public name and the module that defines it, imported on first use (PEP 562): ``jiyu
# --help`` or ``jiyu jobs`` need one or two of them, not the launcher, the scheduler backends
# and the exporter (tens of milliseconds of a command's start-up). No name here may also be a
# module of this package: importing that module binds its name on the package, over the function
# (``jobs.upkeep`` became a module once a submit had imported it; tests/test_imports.py checks).
_HOMES = {
    "list_runs": ".run_control",
    "list_page": ".run_control",
    "move_to_top": ".run_control",
    "queued_runs": ".run_control",
    "others_waiting": ".run_control",
    "resolve": ".run_control",
    "stop": ".run_control",
    "stop_report": ".run_control",
    "StopReport": ".run_control",
    "JobError": ".job_error",
    "ExecutedCell": ".export.notebook_export",
    "Export": ".export.notebook_export",
    "export_history": ".export.notebook_export",
    "export_notebook": ".export.notebook_export",
    "RunLifecycle": ".lifecycle",
    "Launch": ".process.torchrun_launch",
    "parse_lines": ".export.params",
    "parse_pairs": ".export.params",
    "upkeep": ".run_upkeep",
    "SubmitNotes": ".submission",
    "submit": ".submission",
    "submit_notes": ".submission",
}
_ORIGINAL_NAMES: dict[str, str] = {}

if TYPE_CHECKING:
    from .export.notebook_export import ExecutedCell, Export, export_history, export_notebook
    from .export.params import parse_lines, parse_pairs
    from .job_error import JobError
    from .lifecycle import RunLifecycle
    from .process.torchrun_launch import Launch
    from .run_control import (
        StopReport,
        list_page,
        list_runs,
        move_to_top,
        others_waiting,
        queued_runs,
        resolve,
        stop,
        stop_report,
    )
    from .run_upkeep import upkeep
    from .submission import SubmitNotes, submit, submit_notes


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), _ORIGINAL_NAMES.get(name, name))
    globals()[name] = value
    return value


__all__ = [
    "JobError",
    "submit",
    "stop",
    "stop_report",
    "StopReport",
    "queued_runs",
    "others_waiting",
    "move_to_top",
    "resolve",
    "list_runs",
    "list_page",
    "ExecutedCell",
    "Export",
    "export_history",
    "export_notebook",
    "Launch",
    "RunLifecycle",
    "parse_lines",
    "parse_pairs",
    "SubmitNotes",
    "submit_notes",
    "upkeep",
]
