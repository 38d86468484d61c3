"""What a person (or the Jupyter server's load) tells jiyu through the environment that is read
at each use rather than once: the home folder, the box, the queue's limits, the trackers'
defaults, the backends' images and configuration. The variables are documented in
``core.environment``.

Unlike a launcher's variables (``runs.launch_context``, read once where a process starts), these
may change while one process runs, and the code that uses them must see the change: the server's
load writes ``JIYU_HOME``, ``JIYU_GPU_BUSY_MIB`` and ``JIYU_MAX_CPU_JOBS`` from its options for
the code it then runs and the jobs it starts, ``%env`` changes a kernel's, each test points its
process at a home of its own. So a module that needs one asks ``Settings.from_environ()`` when it
needs it, or takes the environment a caller gave (``from_environ(env)``, reading nothing), and
this is the one module that reads them (``tests/test_architecture.py`` keeps it so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

HOME_ENV = "JIYU_HOME"
BOX_ENV = "JIYU_BOX"
GPU_BUSY_ENV = "JIYU_GPU_BUSY_MIB"
STORE_BUSY_ENV = "JIYU_STORE_BUSY_S"
CPU_JOBS_ENV = "JIYU_MAX_CPU_JOBS"
MLFLOW_URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
IMAGE_ENV = "JIYU_IMAGE"
K8S_CLAIM_ENV = "JIYU_K8S_CLAIM"
POOL_HOST_ENV = "JIYU_POOL_HOST"
SLURM_CONF_ENV = "SLURM_CONF"
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class Settings:
    """The raw values, as set (None: unset); each user parses and checks its own."""

    home: str | None = None  # the run store's folder (runs.files.jiyu_home)
    box: str | None = None  # the shared box's folder (box.location.find)
    gpu_busy_mib: str | None = None  # foreign MiB above which a GPU is busy (gpu.owners)
    store_busy_s: str | None = None  # how long a command waits for a locked store (store.database)
    max_cpu_jobs: str | None = None  # runs without a GPU at once (jobs.gpu_queue)
    mlflow_uri: str | None = None  # MLflow's own: where --track mlflow goes (trackers.destinations)
    mlflow_experiment: str | None = None  # MLflow's own: the experiment of tracked runs
    image: str | None = None  # the container image of a Kubernetes job
    k8s_claim: str | None = None  # the volume claim a Kubernetes job mounts as its home
    pool_host: str | None = None  # the kernel's address a pool's allocation reaches (ranks.allocation)
    slurm_conf: str | None = None  # Slurm's own: the configuration its tools read
    visible_devices: str | None = None  # the GPUs this process sees now (gpu.snapshot, gpu.doctor)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``environ``; without it, in this process's environment now."""
        env = os.environ if environ is None else environ
        return cls(
            home=env.get(HOME_ENV) or None,
            box=env.get(BOX_ENV, "").strip() or None,
            gpu_busy_mib=env.get(GPU_BUSY_ENV) or None,
            store_busy_s=env.get(STORE_BUSY_ENV) or None,
            max_cpu_jobs=env.get(CPU_JOBS_ENV, "").strip() or None,
            mlflow_uri=env.get(MLFLOW_URI_ENV) or None,
            mlflow_experiment=env.get(EXPERIMENT_ENV) or None,
            image=env.get(IMAGE_ENV) or None,
            k8s_claim=env.get(K8S_CLAIM_ENV) or None,
            pool_host=env.get(POOL_HOST_ENV) or None,
            slurm_conf=env.get(SLURM_CONF_ENV),
            visible_devices=env.get(VISIBLE_DEVICES_ENV),
        )
