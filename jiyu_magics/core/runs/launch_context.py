"""What the launcher of a training process told it through the environment, read once.

A process that trains learns from its environment whether a launcher made its run (``JIYU_RUN_ID``),
whether it resumes (``JIYU_RESUME``, a torchrun restart), which weights it starts from and where it
hands its result back (``%%train --nproc``), and where it sits in a torchrun world. ``fit`` (the
entry point of training in any process: a kernel, a rank of a job) reads it here once and passes
the value on, so what a call does is visible in what it was given, and no module under ``train/``
reads the environment itself. The variables are documented in ``core.environment``.

Every process jiyu starts reads it the same way, once, at its entry point: a job's rank
(``jobs.process.rank_worker``), a ranks pool's rank and supervisor (``ranks.worker``,
``ranks.supervisor``), ``fit`` in a script, a magic's call. ``tests/test_architecture.py`` keeps
the environment reads in those entry points and here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .files import RUN_ID_ENV

RESUME_ENV = "JIYU_RESUME"
INIT_WEIGHTS_ENV = "JIYU_INIT_WEIGHTS"
FINAL_WEIGHTS_ENV = "JIYU_FINAL_WEIGHTS"
NOTEBOOK_ENV = "JPY_SESSION_NAME"  # jupyter_server tells the kernel its notebook's path
RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"
TRACK_ENV = "JIYU_TRACK"
UI_ENV = "JIYU_UI"  # ``text``: the magics show text, for front-ends that cannot show widgets
POOL_ADDRESS_ENV = "JIYU_POOL"  # where a rank finds its pool's address file
POOL_GENERATION_ENV = "JIYU_POOL_GENERATION"  # the generation a rank joins first (a replacement: the next one)
POOL_SUPERVISED_ENV = "JIYU_POOL_SUPERVISED"  # set by the pool's supervisor, which hosts the store


@dataclass(frozen=True)
class LaunchContext:
    run_id: str | None = None  # a launcher made the run; this process writes into it
    resume: str | None = None  # "last": every call resumes from its newest checkpoint
    restart: int = 0  # torchrun's restart count: above 0, each call resumes from its own checkpoint
    init_weights: str | None = None  # the kernel's weights, loaded before wrapping (%%train --nproc)
    final_weights: str | None = None  # where rank 0 writes the trained weights for the kernel
    notebook: str | None = None  # the notebook a kernel runs
    rank: int | None = None  # torchrun's; None outside torchrun
    world_size: int | None = None
    local_rank: int = 0
    error_file: str | None = None  # where a failing rank writes its error for torchrun
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as this process was started with it
    track: str | None = None  # JIYU_TRACK: the trackers of a call that names none (trackers.destinations)
    master: tuple[str, int] | None = None  # MASTER_ADDR:MASTER_PORT, the rendezvous store of a torchrun world
    local_world_size: int = 1  # torchrun's ranks on this node
    pool_address: str | None = None  # JIYU_POOL: a ranks pool's address file (a pool's rank or supervisor)
    pool_generation: int = 0  # the generation of the pool's process group a rank joins first
    pool_supervised: bool = False  # forked by the pool's supervisor, which hosts the pool's store
    slurm_job: str | None = None  # SLURM_JOB_ID: this process runs on a Slurm allocation
    slurm_node: str | None = None  # SLURMD_NODENAME: this node's name in Slurm
    text_ui: bool = False  # JIYU_UI=text: the magics draw text, not widgets

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> LaunchContext:
        env = os.environ if environ is None else environ
        under_torchrun = "RANK" in env and "WORLD_SIZE" in env
        return cls(
            run_id=env.get(RUN_ID_ENV) or None,
            resume=env.get(RESUME_ENV) or None,
            restart=int(env.get(RESTART_ENV, "0") or 0),
            init_weights=env.get(INIT_WEIGHTS_ENV) or None,
            final_weights=env.get(FINAL_WEIGHTS_ENV) or None,
            notebook=env.get(NOTEBOOK_ENV) or None,
            rank=int(env["RANK"]) if under_torchrun else None,
            world_size=int(env["WORLD_SIZE"]) if under_torchrun else None,
            local_rank=int(env.get("LOCAL_RANK", 0) or 0),
            error_file=env.get("TORCHELASTIC_ERROR_FILE") or None,
            visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
            track=env.get(TRACK_ENV),
            master=(env["MASTER_ADDR"], int(env["MASTER_PORT"]))
            if env.get("MASTER_ADDR") and env.get("MASTER_PORT")
            else None,
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1") or 1),
            pool_address=env.get(POOL_ADDRESS_ENV) or None,
            pool_generation=int(env.get(POOL_GENERATION_ENV, "0") or 0),
            pool_supervised=bool(env.get(POOL_SUPERVISED_ENV)),
            slurm_job=env.get("SLURM_JOB_ID") or None,
            slurm_node=env.get("SLURMD_NODENAME") or None,
            text_ui=env.get(UI_ENV, "").lower() == "text",
        )

    @property
    def launched(self) -> bool:
        """A launcher started this process (a torchrun rank or a jiyu job): SIGTERM and SIGUSR1
        mean a stop and a time limit here, unlike in a kernel."""
        return self.rank is not None or self.run_id is not None

    @property
    def pool_rank(self) -> bool:
        """A rank of a ranks pool (its stop comes as one interrupt, never a SIGTERM)."""
        return self.pool_address is not None

    @property
    def torchrun_world(self) -> tuple[int, int, int] | None:
        """(rank, world size, local rank) when started by torchrun, else None."""
        if self.rank is None or self.world_size is None:
            return None
        return self.rank, self.world_size, self.local_rank

    @property
    def relaunched(self) -> bool:
        """The script runs again: torchrun restarted the workers, or the launcher asks every
        call to go on from where it was (``JIYU_RESUME=last``: a Slurm requeue)."""
        return self.restart > 0 or self.resume == "last"

    @property
    def rank_zero(self) -> bool:
        """Rank 0 of a torchrun world, or a process outside one: the one that speaks for all."""
        return self.rank in (None, 0)
