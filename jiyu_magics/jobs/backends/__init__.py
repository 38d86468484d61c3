"""Beyond this machine: the same exported script as a Slurm batch job or a Kubeflow job.

Each scheduler is a placement of the run lifecycle (``rank_placement``): it writes its spec
into the run folder and submits it when its tool (``sbatch`` / ``kubectl``) is installed and
configured, and otherwise says how to submit it on the cluster; its handle follows the job
there and cancels it. What happened at submission is kept as a ``Handover`` (``handover``) for the views.
"""

from __future__ import annotations

SCHEDULED_BACKENDS = ("slurm", "kubernetes")


def placement_for(backend: str, **options):
    """The scheduler placement of ``backend`` (``slurm`` or ``kubernetes``)."""
    if backend == "slurm":
        from .slurm.placement import SlurmPlacement

        return SlurmPlacement(**options)
    if backend == "kubernetes":
        from .kubernetes.placement import KubernetesPlacement

        return KubernetesPlacement(**options)
    raise ValueError(f"no scheduler placement for backend {backend!r}")
