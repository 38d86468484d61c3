"""How a job is to be launched, checked once at submit time and saved in its run folder
(``launch.json``) for the supervisor. Every check fails with a one-line ``JobError``."""

from __future__ import annotations

import json
import math
import shlex
import shutil
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
    stall_timeout: float | None = None  # the default of the job's fit calls (seconds; 0: off; None: the rule)

    def validated(self) -> LaunchSpec:
        _count("--nproc", self.nproc, 1)
        _count("--nnodes", self.nnodes, 1)
        _count("--max-restarts", self.max_restarts, 0)
        if self.gpus is not None:
            _count("--gpus", self.gpus, 0)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise JobError(f"--priority {self.priority!r}: expected a whole number")
        if self.stall_timeout is not None and (
            isinstance(self.stall_timeout, bool)
            or not isinstance(self.stall_timeout, (int, float))
            or not 0 <= self.stall_timeout < math.inf
        ):  # nan, inf too
            raise JobError(f"--stall-timeout {self.stall_timeout!r}: expected seconds >= 0 (0: off)")
        if self.backend not in BACKENDS:
            raise JobError(f"--backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        self._check_rendezvous()
        self._check_scheduler_options()
        if self.notify is not None:
            _check_command(self.notify)
        return self

    def _check_rendezvous(self) -> None:
        if self.rdzv_endpoint is not None:
            host, _, port = str(self.rdzv_endpoint).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise JobError(f"--rdzv-endpoint {self.rdzv_endpoint!r}: expected HOST:PORT")
        if self.node_rank is not None:
            _count("--node-rank", self.node_rank, 0)
            if self.node_rank >= self.nnodes:
                raise JobError(f"--node-rank {self.node_rank} must be below --nnodes {self.nnodes}")
        if self.backend == "local" and self.nnodes > 1 and not self.rdzv_endpoint:
            raise JobError(f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (the first node's address)")

    def _check_scheduler_options(self) -> None:
        if self.slurm and self.backend != "slurm":
            raise JobError(f"{', '.join(_flags(self.slurm))}: Slurm options, for --backend slurm only")
        if self.k8s_kind is not None:
            if self.backend != "kubernetes":
                raise JobError(f"--k8s-kind {self.k8s_kind}: for --backend kubernetes only")
            if self.k8s_kind not in K8S_KINDS:
                raise JobError(f"--k8s-kind {self.k8s_kind!r}: expected one of {', '.join(K8S_KINDS)}")

    def with_gpus(self, visible: int | None) -> LaunchSpec:
        """The spec with its GPU count decided against the ``visible`` GPUs (None: none here)
        and checked: more than the machine has, or fewer than one per process, is refused."""
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
        return {"gpus_requested": self.gpus, "priority": self.priority, "share": bool(self.share)}

    def save(self, files: RunFiles) -> None:
        (files.root / LAUNCH_FILE).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, files: RunFiles) -> LaunchSpec:
        return cls(**json.loads((files.root / LAUNCH_FILE).read_text()))


def _flags(options: dict) -> list[str]:
    return ["--sbatch-arg" if name == "sbatch_args" else "--" + name.replace("_", "-") for name in options]


def _count(flag: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobError(f"{flag} {value!r}: expected a whole number >= {minimum}")


def _check_command(command: str) -> None:
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise JobError(f"--notify {command!r}: {error}") from None
    if not words or shutil.which(words[0]) is None:
        raise JobError(f"--notify {command!r}: {words[0] if words else 'the command'} is not an executable on PATH")


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
