"""``--resume last`` as the messages print it (issue 11), and wherever the checkpoints went
(issue 12, item 4): through ``%%train``/``%train`` in a real IPython shell."""

from __future__ import annotations

import re

import pytest

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles

from .train_models import shell_setup, shell_train_body

SETUP = shell_setup(512, "MisbehavingMlp")
BODY = shell_train_body("MisbehavingMlp(interrupt_at=-1)", lr=1e-2)


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def start_of(result) -> dict:
    return next(e for e in read_events(RunFiles.of(result.run_id).events)[0] if e["kind"] == "start")


def test_the_stop_message_prints_a_resume_command_that_works(shell):
    shell.run_cell("%%train --epochs 3 --name digits-cnn" + BODY.replace("interrupt_at=-1", "interrupt_at=10"))
    stopped = shell.user_ns["train_result"]
    assert stopped.status == "stopped" and stopped.step == 10
    command = re.search(r"Continue with (%train [^(]*?) \(or fit", stopped.message)
    assert command and command.group(1) == "%train --resume last --name digits-cnn --epochs 3", stopped.message
    shell.run_cell(command.group(1))
    resumed = shell.user_ns["train_result"]
    assert resumed.status == "succeeded" and resumed.step == 48
    assert start_of(resumed)["resumed_from"] == stopped.checkpoints[-1]


def test_without_a_name_the_command_names_the_default_one(shell):
    """The command always names the run (as the run page's does): pasted into another notebook,
    or after a --name run of the same model, it still finds this run's checkpoint."""
    shell.run_cell("%%train --max-steps 30" + BODY.replace("interrupt_at=-1", "interrupt_at=5"))
    result = shell.user_ns["train_result"]
    name = start_of(result)["name"]
    assert f"Continue with %train --resume last --name {name} --max-steps 30 (or fit" in result.message


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
