"""A Slurm batch script: one ``srun`` task per node, each running ``torchrun`` for that
node's ranks, all meeting at a c10d rendezvous on the first node of the allocation."""

from __future__ import annotations

import shlex
from pathlib import Path

from ...core.run_files import HOME_ENV, RUN_ID_ENV, RunFiles, jiyu_home
from ...core.run_names import scheduler_slug
from ...core.run_store import Run
from ..process import torchrun_command as torchrun
from ..launch_spec import LaunchSpec

TOOL = "sbatch"
SUBMIT_ARGS = ("--parsable",)
RDZV_PORT = 29500
SCRIPT_NAME = "job.sbatch"


def render(run: Run, spec: LaunchSpec, files: RunFiles) -> str:
    cmd = torchrun.command(files.script, spec.nproc, nnodes=spec.nnodes, rdzv_endpoint=f"$head_node:{RDZV_PORT}",
                           rdzv_id="$SLURM_JOB_ID", max_restarts=spec.max_restarts, launcher=["torchrun"])
    lines = [
        "#!/bin/bash",
        f"# Slurm job for jiyu run {run.id} ({run.name!r}), exported from {run.notebook!r}.",
        f"#SBATCH --job-name=jiyu-{scheduler_slug(run.name)}",
        f"#SBATCH --nodes={spec.nnodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={spec.nproc}",
        f"#SBATCH --output={files.root}/slurm-%j.log",
        f"#SBATCH --chdir={run.cwd}",
        "set -euo pipefail",
        f"export {RUN_ID_ENV}={shlex.quote(run.id)} {HOME_ENV}={shlex.quote(str(jiyu_home()))}",
        f"export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={shlex.quote(torchrun.LINE_PREFIX_TEMPLATE)}",
        *(f"export {k}={shlex.quote(v)}" for k, v in torchrun.STORE_SETTINGS.items()),
        "# The first node of the allocation hosts the rendezvous.",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "srun --kill-on-bad-exit=1 " + " ".join(map(_quote, cmd)),
    ]
    return "\n".join(lines) + "\n"


def _quote(word: str) -> str:
    """Shell-quote, except the variables the batch script itself sets, which must expand."""
    return f'"{word}"' if "$" in word and "{" not in word else shlex.quote(word)


def write_spec(run: Run, spec: LaunchSpec, files: RunFiles) -> Path:
    path = files.root / SCRIPT_NAME
    path.write_text(render(run, spec, files))
    path.chmod(0o755)
    return path


def manual_instructions(path: Path) -> str:
    return f"sbatch is not installed here; on the cluster's login node run:\n  sbatch {path}"
