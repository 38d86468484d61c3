"""The notebook the Slurm tests submit: a small real ``%%train`` run (the engine, DDP on gloo
under Slurm's srun + torchrun), with knobs to make one rank fail or stall, or the first attempt
too slow for its time limit; and how the tests follow a run there as a user would."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_row import Run
from jiyu_magics.jobs.backends.slurm import commands as slurm_commands

PARAMETERS = """\
steps = 40
step_seconds = 0.0        # each step sleeps this long (a slow model)
first_attempt_seconds = None  # Slurm's first attempt sleeps this long per step instead: too slow for its limit
fail_rank = -1            # this rank raises at its fail_step-th step
fail_step = 3
stall_rank = -1           # this rank sleeps for good at its stall_step-th step, before its all-reduce
stall_step = 5
"""

SETUP = """\
import os, time
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)
first_attempt = os.environ.get("SLURM_RESTART_COUNT", "0") == "0"
pause = first_attempt_seconds if (first_attempt and first_attempt_seconds is not None) else step_seconds
calls = 0

def train_step(model, batch):
    global calls
    calls += 1
    if int(os.environ.get("RANK", "0")) == fail_rank and calls == fail_step:
        raise RuntimeError(f"rank {fail_rank} gave up at step {fail_step}")
    if int(os.environ.get("RANK", "0")) == stall_rank and calls == stall_step:
        time.sleep(3600)
    time.sleep(pause)
    inputs, targets = batch
    return nn.functional.mse_loss(model(inputs), targets)
"""

TRAIN = """\
%%train --max-steps {steps} --name slurm-regression --log-every 1
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
train_loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
"""


def write_notebook(path: Path, **overrides) -> Path:
    lines = []
    for line in PARAMETERS.splitlines():
        name = line.split("=")[0].strip()
        lines.append(f"{name} = {overrides[name]!r}" if name in overrides else line)
    cells = [
        new_markdown_cell("# A regression trained on Slurm"),
        new_code_cell("\n".join(lines) + "\n"),
        new_code_cell(SETUP),
        new_code_cell(TRAIN),
        new_code_cell("print('trained to', train_result.history[-1])"),
    ]
    cells[1].metadata["tags"] = ["parameters"]
    nb = new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nbformat.write(nb, path)
    return path


def events(run_id: str, kind: str) -> list[dict]:
    return [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == kind]


def ended(run_id: str, timeout: float = 240) -> Run:
    """The run once it ended, asking as a user would (``jobs.resolve``: what the scheduler
    follower recorded)."""
    from .jobs_workload import wait_for

    return wait_for(
        lambda: (lambda r: None if r.active else r)(jobs.resolve(run_id)), timeout, every=1, what=f"run {run_id} to end"
    )


def job_state(slurm, job_id: str) -> str:
    return slurm_commands.parse_fields(slurm.run("scontrol", "show", "job", "-o", job_id).stdout)["JobState"]
