"""``--resume last`` as the messages print it (issue 11), and wherever the checkpoints went
(issue 12, item 4): through ``%%train``/``%train`` in a real IPython shell."""

from __future__ import annotations

import re

import pytest

from jiyu_magics.core.event_log import read_events
from jiyu_magics.core.run_files import RunFiles

SETUP = """
import os, signal
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Interrupted(nn.Module):
    '''An MLP that interrupts its kernel (as the user's Stop would) at one training step.'''

    def __init__(self, stop_at):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
        self.stop_at, self.calls = stop_at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls == self.stop_at:
                os.kill(os.getpid(), signal.SIGINT)
        return self.net(x)

torch.manual_seed(0)
X = torch.randn(512, 20); y = (X[:, 0] > 0).long()
"""

BODY = """
model = Interrupted(stop_at=-1)
optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
loss_fn = nn.CrossEntropyLoss()
"""


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def start_of(result) -> dict:
    return next(e for e in read_events(RunFiles.of(result.run_id).events)[0] if e["kind"] == "start")


def test_the_stop_message_prints_a_resume_command_that_works(shell):
    shell.run_cell("%%train --epochs 3 --name digits-cnn" + BODY.replace("stop_at=-1", "stop_at=10"))
    stopped = shell.user_ns["train_result"]
    assert stopped.status == "stopped" and stopped.step == 10
    command = re.search(r"Continue with (%train [^(]*?) \(or fit", stopped.message)
    assert command and command.group(1) == "%train --resume last --name digits-cnn --epochs 3", stopped.message
    shell.run_cell(command.group(1))
    resumed = shell.user_ns["train_result"]
    assert resumed.status == "succeeded" and resumed.step == 48
    assert start_of(resumed)["resumed_from"] == stopped.checkpoints[-1]


def test_without_a_name_the_command_leaves_it_out(shell):
    shell.run_cell("%%train --max-steps 30" + BODY.replace("stop_at=-1", "stop_at=5"))
    message = shell.user_ns["train_result"].message
    assert "Continue with %train --resume last --max-steps 30 (or fit" in message


def test_resume_last_finds_the_checkpoint_written_to_a_ckpt_dir(shell, tmp_path, monkeypatch):
    """The second run wrote its checkpoints to --ckpt-dir (relative, as typed); the third
    resumes from there, not from the first run's own folder (which lost it 16 steps)."""
    monkeypatch.chdir(tmp_path)
    shell.run_cell("%%train --epochs 1 --name exp" + BODY)
    shell.run_cell("%train --epochs 2 --name exp --resume last --ckpt-dir elsewhere")
    second = shell.user_ns["train_result"]
    assert second.step == 32
    shell.run_cell("%train --epochs 3 --name exp --resume last")
    third = shell.user_ns["train_result"]
    assert third.step == 48 and third.message.startswith("Trained 16 more steps, to step 48"), third.message
    written = str(tmp_path / "elsewhere" / "step-00000032.pt")
    assert start_of(third)["resumed_from"] == written == second.checkpoints[-1], "recorded as an absolute path"
