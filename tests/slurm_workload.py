"""The notebook the Slurm tests submit: a small real ``%%train`` run (the engine, DDP on gloo
under Slurm's srun + torchrun), with knobs to make one rank fail or the first attempt too slow
for its time limit."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

PARAMETERS = """\
steps = 40
step_seconds = 0.0        # each step sleeps this long (a slow model)
first_attempt_seconds = None  # Slurm's first attempt sleeps this long per step instead: too slow for its limit
fail_rank = -1            # this rank raises at its fail_step-th step
fail_step = 3
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
