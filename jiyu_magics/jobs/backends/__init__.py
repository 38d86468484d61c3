"""Beyond this machine: the same exported script as a Slurm batch job or a Kubeflow
``PyTorchJob``. Each backend writes its spec into the run folder, submits it when its tool
(``sbatch`` / ``kubectl``) is installed, and otherwise says what to run."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass

from ...core.run_files import RunFiles
from ...core.run_store import Run, RunStore
from ..job_error import JobError
from ..launch_spec import LaunchSpec

HANDOVER_FILE = "handover.json"


@dataclass
class Handover:
    """What happened to a spec: ``submitted`` (with the scheduler's output) or not, and the
    text to show the user (the command to run, or the manifest itself)."""

    backend: str
    spec_file: str
    submitted: bool
    message: str

    def save(self, files: RunFiles) -> None:
        (files.root / HANDOVER_FILE).write_text(json.dumps(self.__dict__, indent=2))

    @classmethod
    def load(cls, run_id: str) -> "Handover | None":
        try:
            return cls(**json.loads((RunFiles.of(run_id).root / HANDOVER_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None


def hand_over(store: RunStore, run: Run, spec: LaunchSpec, files: RunFiles) -> Handover:
    from . import kubernetes, slurm

    backend = {"slurm": slurm, "kubernetes": kubernetes}[spec.backend]
    path = backend.write_spec(run, spec, files)
    tool = shutil.which(backend.TOOL)
    if tool is None:
        handover = Handover(spec.backend, str(path), False, backend.manual_instructions(path))
    else:
        done = subprocess.run([tool, *backend.SUBMIT_ARGS, str(path)], capture_output=True, text=True, timeout=120)
        if done.returncode:
            last = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
            raise JobError(f"{backend.TOOL} failed ({last}); the spec is at {path}")
        handover = Handover(spec.backend, str(path), True, f"{backend.TOOL}: {done.stdout.strip()}")
    handover.save(files)
    return handover
