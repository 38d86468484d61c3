"""Every environment variable jiyu reads, with who sets it and what it does: the one list the
documentation's table is generated from (``docs/_ext/jiyu_reference.py``), and a test keeps it
complete (every ``JIYU_*`` name in the package is here).

Who reads them, each kind in one place (``tests/test_architecture.py`` keeps it so):

- the variables a launcher sets for the processes it starts: ``runs.launch_context.LaunchContext``,
  read once at each entry point (a job's rank, a ranks pool's rank and supervisor, ``fit`` in a
  script, a magic's call) and passed on as a value; the training code reads no environment;
- what a person sets and one process may change while it runs (the home, the box, the queue's
  limits...): ``settings.Settings``, read at each use;
- the Jupyter server's options: the server extension's load; a Slurm node's: its entry point.

A process that starts a child hands it this process's environment through ``child_environment``:
it copies the environment for another process and reads no setting of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def child_environment(extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment for a child it starts (``subprocess``'s ``env=``): what the
    person set (PATH, CUDA_VISIBLE_DEVICES, NCCL_*, what ``%env`` set...) passes on, less the
    names in ``drop``, plus ``extra``."""
    dropped = frozenset(drop)
    return {**{k: v for k, v in os.environ.items() if k not in dropped}, **(extra or {})}


@dataclass(frozen=True)
class Variable:
    name: str
    set_by: str  # "you" where a person sets it; else the launcher, torchrun, Jupyter...
    meaning: str


VARIABLES = (
    Variable("JIYU_HOME", "you", "The folder of the run store (jiyu.sqlite) and the run folders; default ~/.jiyu."),
    Variable(
        "JIYU_BOX",
        "you / the admin",
        "The folder of the shared box's GPU book (`jiyu box init --path`); default /var/lib/jiyu/box when "
        "it exists, else leases stay in JIYU_HOME.",
    ),
    Variable(
        "JIYU_BOX_INIT",
        "the admin (the image)",
        "`1`: the image's entrypoint runs `jiyu box init` (at JIYU_BOX, for JIYU_BOX_GROUP) before anything else.",
    ),
    Variable(
        "JIYU_BOX_GROUP", "the admin (the image)", "The Unix group whose members may use the box the image sets up."
    ),
    Variable("JIYU_UI", "you", "`text`: `%%train` shows text progress instead of the ipywidgets dashboard."),
    Variable(
        "JIYU_MAX_CPU_JOBS",
        "you / the Jupyter server",
        "How many runs that want no GPU may run at once (unset: no limit).",
    ),
    Variable(
        "JIYU_GPU_BUSY_MIB",
        "you / the Jupyter server",
        "MiB of memory processes outside jiyu may hold on a GPU before queued runs stop leasing it.",
    ),
    Variable(
        "JIYU_METRICS_TOKEN", "you", "A secret that lets Prometheus scrape /jiyu/metrics without a Jupyter login."
    ),
    Variable(
        "JIYU_TRACK",
        "you",
        "The trackers of a run that names none: `tensorboard[:DIR]`, `mlflow[:URI]`, a comma list, or `none` "
        "(else `track:` in `$JIYU_HOME/config.yaml`).",
    ),
    Variable(
        "MLFLOW_TRACKING_URI",
        "you (MLflow's own)",
        "Where `--track mlflow` without a URI goes (else `sqlite:///$JIYU_HOME/mlflow.db`).",
    ),
    Variable("MLFLOW_EXPERIMENT_NAME", "you (MLflow's own)", "The MLflow experiment of tracked runs (else `jiyu`)."),
    Variable(
        "JIYU_STORE_BUSY_S",
        "you",
        "How long a command waits for a store another process holds locked before it says so and gives up "
        "(default 30 s; supervisors keep retrying).",
    ),
    Variable(
        "JIYU_POOL_HOST",
        "you",
        "The kernel's address the nodes of a ranks pool's Slurm allocation reach (default: the address on "
        "the route to the allocation's first node).",
    ),
    Variable("JIYU_IMAGE", "you", "The container image Kubernetes runs a job in (--backend kubernetes)."),
    Variable("JIYU_K8S_CLAIM", "you", "The PersistentVolumeClaim mounted as JIYU_HOME in Kubernetes jobs."),
    Variable(
        "JIYU_RUN_ID", "the launcher", "The run a launched process writes into; `fit` registers no run of its own."
    ),
    Variable(
        "JIYU_RESUME",
        "the launcher",
        "`last`: every training call of the job resumes from its newest checkpoint (a Slurm requeue).",
    ),
    Variable(
        "JIYU_INIT_WEIGHTS",
        "`%%train --nproc`",
        "The kernel's model weights, loaded by each rank before it wraps the model.",
    ),
    Variable("JIYU_FINAL_WEIGHTS", "`%%train --nproc`", "Where rank 0 writes the trained weights for the kernel."),
    Variable("JIYU_RUN_STATUS", "the supervisor", "The run's final status, for the `--notify` command."),
    Variable(
        "JIYU_POOL", "`%ranks start`", "A ranks pool's address file: its kernel's sockets (and keys, on an allocation)."
    ),
    Variable(
        "JIYU_POOL_SUPERVISED",
        "the pool's supervisor",
        "Set in the ranks it forks: it hosts the pool's store (under torchrun rank 0 does).",
    ),
    Variable(
        "JIYU_POOL_GENERATION",
        "the pool's supervisor",
        "The generation of the process group a rank joins first (a replacement joins the next one).",
    ),
    Variable("RANK", "torchrun", "This process's rank: `fit` joins the process group (NCCL on GPUs, gloo on CPU)."),
    Variable("WORLD_SIZE", "torchrun", "How many ranks the job has."),
    Variable("LOCAL_RANK", "torchrun", "This rank's index on its node: its GPU."),
    Variable(
        "TORCHELASTIC_RESTART_COUNT",
        "torchrun",
        "Above 0 after a restart (--max-restarts): each call resumes from its own checkpoint.",
    ),
    Variable("TORCHELASTIC_ERROR_FILE", "torchrun", "Where a failing rank writes its error for the launcher."),
    Variable("CUDA_VISIBLE_DEVICES", "the launcher", "The GPUs a run leased, by UUID: all its ranks see."),
    Variable("JPY_SESSION_NAME", "Jupyter", "The notebook a kernel runs: runs are listed under it."),
    Variable("SLURM_CONF", "you / Slurm", "The Slurm configuration `sbatch`, `squeue` and `scontrol` use."),
)


def table() -> list[str]:
    """The variables as Markdown table rows, for the documentation."""
    rows = ["| variable | set by | what it does |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.set_by} | {v.meaning} |" for v in VARIABLES]
    return rows
