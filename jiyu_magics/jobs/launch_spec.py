"""How a run is to be launched, saved in its run folder (``launch.json``) for its owner (the
supervisor, a scheduler's placement). Made from the checked ``SubmitOptions`` (``submit_options``)
or by ``%%train --nproc``; what it still decides at submit time (how many GPUs, against those
visible) fails with a one-line ``JobError``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from ..core.runs.files import RunFiles
from .job_error import JobError

BACKENDS = ("local", "slurm", "kubernetes")
K8S_KINDS = ("trainjob", "pytorchjob")  # Kubeflow Trainer v2's TrainJob; the training operator's PyTorchJob
LAUNCH_FILE = "launch.json"


@dataclass
class LaunchSpec:
    nproc: int = 1
    nnodes: int = 1
    max_restarts: int = 0
    backend: str = "local"
    rdzv_endpoint: str | None = None
    node_rank: int | None = None
    notify: str | None = None
    slurm: dict | None = None  # SlurmOptions as a dict (backends/slurm_options), for --backend slurm
    k8s_kind: str | None = None  # for --backend kubernetes: trainjob (default) or pytorchjob
    gpus: int | None = None  # GPUs per node to lease; None: one per process where GPUs are visible, else 0
    priority: int = 0  # higher starts first among waiting runs
    share: bool = False  # may lease GPUs other sharing runs lease too
    preemptible: bool = False  # on a box: stops with a checkpoint and requeues for a long-waiting run of another user
    stall_timeout: float | None = None  # the default of the job's fit calls (seconds; 0: off; None: the rule)
    track: list[str] | None = None  # the trackers the submission named (trackers.destinations), for its owner

    def with_gpus(self, visible: int | None) -> LaunchSpec:
        """The spec with its GPU count decided against the ``visible`` GPUs (None: none here)
        and checked: more than the machine has, or fewer than one per process, is refused."""
        visible = visible or 0
        if self.gpus is None and visible:
            check_fits_devices(self.nproc, visible)
        gpus = (self.nproc if visible else 0) if self.gpus is None else self.gpus
        if gpus and not visible:
            raise JobError(f"--gpus {gpus}: no GPU is visible on this machine (--gpus 0 runs on the CPU)")
        if gpus and gpus > visible:
            raise JobError(f"--gpus {gpus} is more than the {visible} GPU(s) this machine has; it could never start")
        if 0 < gpus < self.nproc:
            raise JobError(
                f"--gpus {gpus} with --nproc {self.nproc}: each process drives a GPU of its own "
                "(--gpus 0 runs every process on the CPU)"
            )
        return replace(self, gpus=gpus)

    def queue_fields(self) -> dict:
        """What the run store's queue needs of the spec (the run row's columns)."""
        return {
            "gpus_requested": self.gpus,
            "priority": self.priority,
            "share": bool(self.share),
            "preemptible": bool(self.preemptible),
        }

    def save(self, files: RunFiles) -> None:
        (files.root / LAUNCH_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, files: RunFiles) -> LaunchSpec:
        return cls(**json.loads((files.root / LAUNCH_FILE).read_text()))


def visible_gpus() -> int | None:
    """How many GPUs CUDA would see here, from NVML (never CUDA); None when none or unknown
    (CPU machines run ranks on gloo, any number of them)."""
    from ..core.gpu import snapshot as gpu

    snap = gpu.snapshot()
    if not snap.available:
        return None
    count = sum(d.visible_index is not None for d in snap.devices)
    return count or None


def check_fits_devices(nproc: int, gpus: int | None = None) -> None:
    gpus = visible_gpus() if gpus is None else gpus
    if gpus is not None and nproc > gpus:
        raise JobError(f"--nproc {nproc} is more than the {gpus} GPU(s) visible here; one process drives one GPU")
