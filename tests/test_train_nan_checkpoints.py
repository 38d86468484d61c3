"""A NaN never costs the good checkpoint (issue 12, item 1), and a NaN's step is the result's step.

A model that outputs NaN once, at its 60th training step, is trained by ``%%train`` in a real
shell with checkpoints every step and every 20 steps, and the loss read at the default wall-clock
interval (so the NaN is seen by the log only well after it happened, as in the issue: at step 84).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.train.checkpoint import load_checkpoint

from .train_models import shell_setup, shell_train_body

SETUP = shell_setup(3200, "MisbehavingMlp")
BODY = shell_train_body("MisbehavingMlp(nan_at=60)", lr=1e-3)


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def finite(path: str) -> bool:
    state = load_checkpoint(path)["model"]
    return all(torch.isfinite(tensor).all() for tensor in state.values() if tensor.is_floating_point())


@pytest.mark.parametrize("every, good_step", [(1, 59), (20, 40)])
def test_a_nan_keeps_the_good_checkpoints_and_names_the_last_good_one(shell, capsys, every, good_step):
    shell.run_cell(f"%%train --epochs 1 --ckpt-every {every} --name nan-run\n{BODY}")
    result = shell.user_ns["train_result"]
    out = capsys.readouterr().out
    assert result.status == "failed" and result.step == 60
    folder = RunFiles.of(result.run_id).ckpt
    kept = sorted(folder.glob("*.pt"))
    assert kept, "the good checkpoints were deleted"
    assert all(finite(path) for path in kept), [p.name for p in kept if not finite(p)]
    assert load_checkpoint(kept[-1])["step"] == good_step
    assert result.checkpoints[-1] == str(kept[-1])
    assert f"Loss became nan at step 60; training stopped, last good checkpoint: {kept[-1]} (step {good_step})" in out
    events = read_events(RunFiles.of(result.run_id).events)[0]
    assert max(e["step"] for e in events if e["kind"] == "ckpt") == good_step, "no checkpoint event after the NaN"
    assert [e["step"] for e in events if e["kind"] == "end"] == [60]


def test_resume_last_after_a_nan_starts_from_the_good_checkpoint(shell):
    shell.run_cell(f"%%train --epochs 1 --ckpt-every 1 --name nan-run\n{BODY}")
    shell.run_cell("model.nan_at = -1")  # the cause fixed
    shell.run_line_magic("train", "--resume last --name nan-run --epochs 1")
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded" and result.history[0]["step"] > 59
    assert all(math.isfinite(row["loss"]) for row in result.history if row["loss"] is not None)
    assert read_events(RunFiles.of(result.run_id).events)[0][0]["start_step"] == 59


def test_weights_gone_bad_with_a_finite_loss_are_not_saved(shell, capsys):
    """A NaN gradient (here put there by a hook) spoils the weights while the loss it came from
    is finite: the checkpoint after it is refused all the same."""
    shell.run_cell(BODY.replace("nan_at=60", "nan_at=-1"))
    shell.run_cell(
        "step_count = [0]\n"
        "def spoil(grad):\n"
        "    step_count[0] += 1\n"
        "    return grad * float('nan') if step_count[0] == 30 else grad\n"
        "model.net[0].weight.register_hook(spoil)"
    )
    shell.run_cell("%train --epochs 1 --ckpt-every 10 --log-every 1000")
    result = shell.user_ns["train_result"]
    out = capsys.readouterr().out
    assert result.status == "failed"
    assert re.search(
        r"The weights became NaN/Inf by step 30 while the loss was still finite; training stopped, "
        r"last good checkpoint: \S+step-00000020\.pt \(step 20\)",
        out,
    ), out
    assert all(finite(path) for path in result.checkpoints)


def test_the_nan_step_is_the_results_step(shell, capsys):
    """After a NaN at step 2 with the loss read every 4 steps, the message and the result agree."""
    shell.run_cell(BODY.replace("nan_at=60", "nan_at=2"))
    shell.run_cell("%train --max-steps 8 --log-every 4 --no-ckpt")
    result = shell.user_ns["train_result"]
    assert "Loss became nan at step 2;" in result.message
    assert result.step == 2


def test_a_buffer_meant_to_hold_inf_is_no_nan(shell):
    """A causal mask kept as a buffer of -inf (as transformer tutorials write it) is how the
    model started: only what started finite must stay finite."""
    shell.run_cell(
        "class Masked(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.net = nn.Linear(20, 2)\n"
        "        self.register_buffer('mask', torch.triu(torch.full((4, 4), float('-inf')), 1))\n"
        "    def forward(self, x):\n"
        "        return self.net(x)\n"
    )
    shell.run_cell("%%train --max-steps 20 --ckpt-every 5" + BODY.replace("MisbehavingMlp(nan_at=60)", "Masked()"))
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded" and len(result.checkpoints) == 3
