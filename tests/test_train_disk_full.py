"""A checkpoint on a full disk, for real: a 2 MiB tmpfs as JIYU_HOME (mounting needs root; the
test says so and skips where mounting is not permitted, as in unprivileged containers)."""

from __future__ import annotations

import subprocess

import pytest

from jiyu_magics.train.checkpoint import load_checkpoint, newest_checkpoint


@pytest.fixture
def tiny_disk(tmp_path, monkeypatch):
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root")
    monkeypatch.setenv("JIYU_HOME", str(mount))
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_line_and_keeps_the_last_checkpoint(ip, tiny_disk, capsys):
    ip.run_cell(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "model = torch.nn.Linear(256, 256)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss_fn = torch.nn.MSELoss()\n"
        "train_loader = TensorDataset(torch.randn(64, 256), torch.randn(64, 256))\n"
    )
    ckpts = tiny_disk / "ckpt"
    result = ip.run_cell(
        f"%train --batch-size 2 --max-steps 30 --ckpt-every 1 --keep-ckpts 100 --ckpt-dir {ckpts} --name full-disk"
    )
    out = capsys.readouterr()
    error = result.error_in_exec
    assert type(error).__name__ == "CheckpointWriteError", out
    line = f"CheckpointWriteError: {error}"
    assert line in out.out + out.err and "Traceback" not in out.out + out.err
    assert "no space left on the disk of" in line and str(tiny_disk) in line and "needs about 0.3 MiB" in line
    last = newest_checkpoint(ckpts)
    assert f"the last checkpoint, {last}, is kept" in line
    assert not [p for p in ckpts.iterdir() if p.name.startswith(".")], "the partial file was left behind"
    assert load_checkpoint(last)["step"] >= 1  # whole and loadable


def test_a_checkpoint_folder_that_cannot_be_made_mid_run_is_one_line(ip, tmp_path, capsys):
    ckpts = tmp_path / "ckpt"
    ip.run_cell(
        "import shutil, torch\nfrom torch.utils.data import TensorDataset\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "train_loader = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\ncalls = []\n"
        "def train_step(m, batch):\n"
        "    calls.append(1)\n"
        f"    if len(calls) == 3:  # the folder goes and a file takes its name (a cleanup script)\n"
        f"        shutil.rmtree({str(ckpts)!r}); open({str(ckpts)!r}, 'w').close()\n"
        "    return torch.nn.functional.mse_loss(m(batch[0]), batch[1])\n"
    )
    result = ip.run_cell(f"%train --batch-size 2 --max-steps 10 --ckpt-every 1 --ckpt-dir {ckpts}")
    out = capsys.readouterr()
    error = result.error_in_exec
    assert type(error).__name__ == "CheckpointWriteError", out
    assert f"CheckpointWriteError: [Errno 17] cannot write checkpoint {ckpts}/step-00000003.pt: File exists" in out.out
    assert "Traceback" not in out.out + out.err


def test_a_ckpt_dir_that_cannot_be_made_is_refused_before_training(ip, tmp_path):
    (tmp_path / "a-file").write_text("")
    ip.run_cell(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "loss_fn = torch.nn.MSELoss()\ntrain_loader = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\n"
    )
    result = ip.run_cell(f"%train --batch-size 2 --max-steps 10 --ckpt-dir {tmp_path}/a-file/ckpt")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert str(result.error_in_exec) == (
        f"ckpt_dir must be a folder checkpoints can be written to; {tmp_path}/a-file/ckpt: Not a directory"
    )
