"""Background jobs: a notebook exported to a script and run by ``torchrun`` under a detached
supervisor, tracked in the run store. No torch, IPython, ipywidgets or tornado imports here:
the server, the CLI and the magics all call these functions.

    from jiyu_magics import jobs
    run = jobs.submit("train.ipynb", nproc=2, params={"lr": 3e-4})
    jobs.stop(run.id)

Launchers hand a run to ``RunLifecycle`` (its one owner: start, follow, stop, final status,
record); runs a scheduler holds (Slurm, Kubernetes) are brought up to date by whoever asks
(``follow_scheduled``, called by ``list_runs``/``resolve`` and the server). Built on ``export_notebook`` / ``export_history`` (the exporter) and ``Launch``
(torchrun as a child process group with per-rank status and a verified stop).
"""

from __future__ import annotations

from .run_control import StopReport, list_runs, move_to_top, queued_runs, resolve, stop, stop_report
from .job_error import JobError
from .export.notebook_export import ExecutedCell, Export, export_history, export_notebook
from .lifecycle import RunLifecycle
from .process.torchrun_launch import Launch
from .export.params import parse_lines, parse_pairs
from .scheduled_runs import follow as follow_scheduled
from .submit import SubmitNotes, submit, submit_notes

__all__ = ["JobError", "submit", "stop", "stop_report", "StopReport", "queued_runs", "move_to_top", "resolve", "list_runs", "ExecutedCell",
           "Export", "export_history", "export_notebook", "Launch", "RunLifecycle", "parse_lines", "parse_pairs",
           "SubmitNotes", "submit_notes", "follow_scheduled"]
