"""Beyond this machine: the same exported script as a Slurm batch job or a Kubeflow job.

Each scheduler is a placement of the run lifecycle (``rank_placement``): it writes its spec
into the run folder and submits it when its tool (``sbatch`` / ``kubectl``) is installed and
configured, and otherwise says how to submit it on the cluster; its handle follows the job
there and cancels it. What happened at submission is kept as a ``Handover`` for the views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ...core.run_files import RunFiles

HANDOVER_FILE = "handover.json"
SCHEDULED_BACKENDS = ("slurm", "kubernetes")


@dataclass
class Handover:
    """What happened to a spec: ``submitted`` (with the scheduler's answer) or not, and the
    text to show the user (what was submitted, or how to submit it)."""

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


def placement_for(backend: str, **options):
    """The scheduler placement of ``backend`` (``slurm`` or ``kubernetes``)."""
    if backend == "slurm":
        from .slurm_placement import SlurmPlacement

        return SlurmPlacement(**options)
    if backend == "kubernetes":
        from .kubernetes_placement import KubernetesPlacement

        return KubernetesPlacement(**options)
    raise ValueError(f"no scheduler placement for backend {backend!r}")
