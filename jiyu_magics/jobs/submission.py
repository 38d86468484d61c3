"""``submit``: a notebook becomes a run (row + folder) and a detached supervisor starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.processes.info import process_start_time
from ..core.runs.files import RunFiles
from ..core.runs.names import name_from
from ..core.store.run_row import Run, save_record
from ..core.store.run_store import RunStore
from ..core.text import BadPath, utf8_path
from . import scheduler_follower
from .backends import placement_for
from .export import job_hazards
from .export.notebook_export import export_notebook
from .job_error import JobError
from .launch_spec import LaunchSpec, visible_gpus
from .lifecycle import RunLifecycle, record_end_without_owner
from .process import torchrun_command as torchrun
from .run_upkeep import upkeep
from .submit_options import SubmitOptions

EXPORT_NOTES = "export.json"
# Supervisors this process started: polled now and then so none stays a zombie in a kernel.
_started: list[subprocess.Popen] = []


def submit(
    notebook: str | os.PathLike, options: SubmitOptions | None = None, *, cwd: str | None = None, **fields: Any
) -> Run:
    """Exports ``notebook`` (with ``options.params`` injected after its ``parameters`` cell) and
    runs it as a torchrun job: ``local`` under a detached supervisor on this machine, ``slurm``
    as a batch job, ``kubernetes`` as a Kubeflow ``TrainJob`` (``k8s_kind="pytorchjob"``: a
    ``PyTorchJob``). A scheduler's job is submitted when ``sbatch``/``kubectl`` can reach one,
    else its spec is written with how to submit it. A local run leases ``gpus`` GPUs (default:
    one per process where GPUs are visible, else 0: a CPU job) and waits ``queued`` until they
    are free, first by ``priority``, then in submission order. ``options`` (``SubmitOptions``,
    as the magic, the CLI and the server parse them) or the same as keyword ``fields``
    (``submit("train.ipynb", nproc=2, params={"lr": 3e-4})``). Returns the run at once. Raises
    ``JobError`` (one line) for bad input; nothing is created then."""
    options = options if options is not None else SubmitOptions.from_fields(**fields)
    spec = options.launch_spec()
    name, params, nproc, nnodes, backend = options.name, options.params, spec.nproc, spec.nnodes, spec.backend
    path = _notebook_path(notebook, cwd)
    export = export_notebook(path, params or None)
    if backend == "local":
        spec = spec.with_gpus(visible_gpus())
    workdir = Path(cwd).expanduser().resolve() if cwd else path.parent
    if not workdir.is_dir():
        raise JobError(f"cwd {workdir}: no such folder")
    store = RunStore()
    upkeep(store)  # the next submit is a writer: runs whose processes are gone are recorded lost
    queue = spec.queue_fields() if backend == "local" else {}
    run = store.create(
        "job",
        name or name_from(path.stem),
        nproc=nproc,
        nnodes=nnodes,
        notebook=str(path),
        cwd=str(workdir),
        backend=backend,
        params=export.params,
        **queue,
    )
    files = RunFiles.of(run.id).create()
    export.write(files.script)
    (files.root / EXPORT_NOTES).write_text(
        json.dumps(
            {
                "code_cells": export.code_cells,
                "left_out": export.left_out,
                "warnings": _warnings(export, nproc * nnodes),
            }
        )
    )
    files.params.write_text(json.dumps(export.params, indent=2, default=repr))
    spec.save(files)
    try:
        _hand_over(store, store.get(run.id), spec, files)
    except Exception as error:
        record_end_without_owner(store, run.id, f"could not start: {error}")
        raise
    return store.get(run.id)


def _notebook_path(notebook: str | os.PathLike, cwd: str | None) -> Path:
    if notebook is None or not str(notebook).strip():
        raise JobError("no notebook given: pass the path of the notebook to run")
    path = Path(notebook).expanduser()
    if not path.is_absolute() and cwd:
        path = Path(cwd).expanduser() / path
    try:  # stored in the run row, shown in listings: it must be text
        utf8_path(path, "notebook")
    except BadPath as error:
        raise JobError(str(error)) from None
    return path.resolve()


def _hand_over(store: RunStore, run: Run, spec: LaunchSpec, files: RunFiles) -> None:
    if spec.backend == "local":
        proc = start_supervisor(run.id, run.cwd, files)
        # the supervisor is the recorded process and the owner (it records the end)
        started = process_start_time(proc.pid)
        run = store.update(run.id, pid=proc.pid, pid_started=started, owner_pid=proc.pid, owner_started=started)
        save_record(run)  # who owns it, in its folder too: a repaired store knows the queued run lives
        return
    RunLifecycle(run.id, spec, placement=placement_for(spec.backend), store=store, owner="submit").start()
    scheduler_follower.ensure_running()  # from here on the follower records what the scheduler says


def start_supervisor(run_id: str, cwd: str | None, files: RunFiles) -> subprocess.Popen:
    """``python -m jiyu_magics.jobs.supervisor RUN_ID`` in a new session: no terminal, no
    signal from the kernel's or the server's process group ever reaches it."""
    _reap()
    with open(files.log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jiyu_magics.jobs.supervisor", run_id],
            cwd=cwd,
            env=torchrun.environment(run_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _started.append(proc)
    return proc


def _reap() -> None:
    _started[:] = [p for p in _started if p.poll() is None]


def _warnings(export, processes: int) -> list[str]:
    found = list(export.warnings)
    if processes > 1 and not export.trains:
        found.insert(0, job_hazards.whole_notebook_per_process(processes))
    return found


@dataclass
class SubmitNotes:
    """What a submission has to tell the person who made it, as plain data for the views."""

    left_out: list[str] = field(default_factory=list)  # one line per cell or command left out
    warnings: list[str] = field(default_factory=list)  # what will likely block or misbehave
    handover: str | None = None  # what the scheduler said (Slurm, Kubernetes)


def submit_notes(run: Run) -> SubmitNotes:
    try:
        saved = json.loads((RunFiles.of(run.id).root / EXPORT_NOTES).read_text())
    except (OSError, ValueError):
        saved = {}
    handover = None
    if run.backend != "local":
        from .backends.handover import Handover

        found = Handover.load(run.id)
        handover = found.message if found else None
    return SubmitNotes(list(saved.get("left_out", [])), list(saved.get("warnings", [])), handover)
