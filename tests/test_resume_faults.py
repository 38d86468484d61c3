"""Resumes that must refuse, or say what they do (issue 24, group 2), through ``%train`` in a
real IPython shell: a checkpoint that does not fit leaves the kernel's model and optimizer as
they were; flipped bytes are caught by the checksum saved with each checkpoint; ``--resume
last`` after a ``--no-ckpt`` run refuses and names the run ``last-checkpoint`` would take; a
resume with another ``--accum`` converts the step count and says so."""

from __future__ import annotations

import hashlib

import pytest

from jiyu_magics.core.store.run_store import RunStore

DATA = (
    "import torch\ntorch.manual_seed(0)\n"
    "train_loader = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(8)]\nloss_fn = torch.nn.MSELoss()\n"
)


@pytest.fixture
def shell(ip):
    ip.run_cell(DATA)
    return ip


def snapshot(shell) -> dict:
    """Every tensor of the kernel's model and optimizer, copied."""
    model, optimizer = shell.user_ns["model"], shell.user_ns["optimizer"]
    state = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for index, per_param in optimizer.state_dict()["state"].items():
        for name, value in per_param.items():
            if hasattr(value, "clone"):
                state[f"opt.{index}.{name}"] = value.clone()
    return state


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def train(shell, line: str):
    result = shell.run_cell(line)
    return result.error_in_exec, shell.user_ns.get("train_result")


@pytest.mark.parametrize(
    "new_model, new_optimizer, words",
    [
        (
            "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2), torch.nn.Linear(2, 1))",
            "torch.optim.AdamW(model.parameters(), lr=0.01)",
            "2.weight",  # a layer the checkpoint does not have, with two that fit before it
        ),
        (
            "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))",
            "torch.optim.AdamW(model.parameters(), lr=0.01)",
            "1.weight has shape (1, 8) in the checkpoint, (3, 8) in the model",
        ),
        (
            "torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))",
            "torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)",
            "saved with a AdamW optimizer, this one is a SGD",
        ),
    ],
)
def test_a_refused_resume_leaves_the_model_and_optimizer_untouched(shell, new_model, new_optimizer, words):
    shell.run_cell(
        "model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)"
    )
    error, saved = train(shell, "%train --epochs 1 --name shapes")
    assert error is None and saved.checkpoints
    shell.run_cell(f"model = {new_model}\noptimizer = {new_optimizer}")
    train(shell, "%train --max-steps 1 --name other --no-ckpt")  # the optimizer holds state of its own
    before = snapshot(shell)
    error, _ = train(shell, f"%train --epochs 2 --name other --no-ckpt --resume {saved.checkpoints[-1]}")
    assert type(error).__name__ == "UsageError" and "does not fit this model" in str(error), error
    assert words in str(error) and "\n" not in str(error)
    assert same(snapshot(shell), before), "the refused checkpoint changed the kernel's model or optimizer"


def test_a_checkpoint_with_flipped_bytes_is_refused_and_loads_nothing(shell):
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    error, saved = train(shell, "%train --epochs 1 --name flipped")
    path = saved.checkpoints[-1]
    data = bytearray(open(path, "rb").read())
    weight = shell.user_ns["model"].weight.detach().numpy().tobytes()
    at = bytes(data).find(weight)
    assert at > 0, "the weight's bytes are in the file"
    data[at + 3] ^= 0x40  # one bit of the first weight's exponent: torch.load would not notice
    open(path, "wb").write(bytes(data))
    assert hashlib.sha256(open(path, "rb").read()).hexdigest() not in open(path + ".sha256").read()
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    before = snapshot(shell)
    error, _ = train(shell, f"%train --epochs 2 --name flipped --resume {path}")
    assert type(error).__name__ == "UsageError" and "is damaged: its SHA-256 differs" in str(error), error
    assert same(snapshot(shell), before)


def test_each_checkpoint_carries_a_checksum_that_sha256sum_reads(shell):
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    _, saved = train(shell, "%train --epochs 3 --ckpt-every 2 --keep-ckpts 2 --name sums")
    import subprocess
    from pathlib import Path

    folder = Path(saved.checkpoints[-1]).parent
    checked = subprocess.run(
        ["sha256sum", "-c", *[p.name for p in sorted(folder.glob("*.sha256"))]],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0 and checked.stdout.count(": OK") == 2, checked.stdout + checked.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [Path(c).name for c in saved.checkpoints] + [Path(c).name + ".sha256" for c in saved.checkpoints]
    ), "a checkpoint rotated out takes its checksum with it"


def test_resume_last_after_a_no_ckpt_run_refuses_and_names_the_run_last_checkpoint_takes(shell, capsys):
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    _, first = train(shell, "%train --epochs 1 --name exp")
    _, second = train(shell, "%train --epochs 1 --name exp --no-ckpt")
    assert second.checkpoints == []
    before = snapshot(shell)
    error, _ = train(shell, "%train --epochs 2 --name exp --resume last")
    assert type(error).__name__ == "UsageError", error
    assert f"the newest run named 'exp', {second.run_id} (succeeded), left no checkpoint" in str(error)
    assert f"--resume last-checkpoint resumes the newest one there is, run {first.run_id}" in str(error)
    assert same(snapshot(shell), before)
    assert [r.id for r in RunStore().list()] == [second.run_id, first.run_id], "the refusal registered no run"
    capsys.readouterr()
    error, third = train(shell, "%train --epochs 2 --name exp --resume last-checkpoint")
    assert error is None and third.step == 16 and third.message.startswith("Trained 8 more steps"), third.message
    said = capsys.readouterr().out  # a note: output, not the stderr a notebook paints pink
    assert f"jiyu: --resume last-checkpoint: run {first.run_id} (succeeded), its checkpoint of step 8: " in said


def test_resume_with_another_accum_converts_the_steps_and_says_so(shell, capsys):
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    _, first = train(shell, "%train --epochs 1 --name acc")
    assert first.step == 8 and first.total_steps == 8
    capsys.readouterr()
    error, resumed = train(shell, "%train --epochs 2 --accum 4 --name acc --resume last")
    assert error is None and resumed.status == "succeeded"
    assert (resumed.step, resumed.total_steps) == (4, 4) and resumed.message.startswith("Trained 2 more steps")
    said = capsys.readouterr().out  # a note: output, not the stderr a notebook paints pink
    assert "the checkpoint counted steps of --accum 1; this call's of --accum 4: its step 8 is step 2 here" in said


def test_resume_last_says_a_damaged_checkpoint_and_takes_the_intact_one_before_it(shell, capsys):
    shell.run_cell("model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    _, first = train(shell, "%train --epochs 2 --ckpt-every 4 --keep-ckpts 2 --name fallback")
    older, newest = first.checkpoints
    data = bytearray(open(newest, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(newest, "wb").write(bytes(data))
    capsys.readouterr()
    error, resumed = train(shell, "%train --epochs 3 --name fallback --resume last")
    assert error is None and resumed.step == 24 and resumed.message.startswith("Trained 12 more steps"), error
    said = capsys.readouterr().err
    assert (
        f"jiyu: checkpoint {newest} is damaged: its SHA-256 differs from the one saved with it "
        f"(step-00000016.pt.sha256); resuming from the one before it, {older}\n"
    ) in said, said
    error, _ = train(shell, f"%train --epochs 3 --name explicit --resume {newest}")
    assert type(error).__name__ == "UsageError" and str(error) == (
        f"checkpoint {newest} is damaged: its SHA-256 differs from the one saved with it "
        "(step-00000016.pt.sha256); resume from an earlier checkpoint"
    )
