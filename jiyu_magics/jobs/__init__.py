"""Background jobs: a notebook exported to a script and run by ``torchrun`` under a detached
supervisor, tracked in the run store. No torch, IPython, ipywidgets or tornado imports here:
the server, the CLI and the magics all call these functions.

    from jiyu_magics import jobs
    run = jobs.submit("train.ipynb", nproc=2, params={"lr": 3e-4})
    jobs.stop(run.id)

Building blocks for launchers: ``export_notebook`` / ``export_history`` (the exporter) and
``Launch`` (torchrun as a child process group with per-rank status and a verified stop).
"""

from __future__ import annotations

from .control import list_runs, resolve, stop
from .errors import JobError
from .export import ExecutedCell, Export, export_history, export_notebook
from .launch import Launch
from .params import parse_pairs
from .submit import submit

__all__ = ["JobError", "submit", "stop", "resolve", "list_runs", "ExecutedCell", "Export", "export_history",
           "export_notebook", "Launch", "parse_pairs"]
