"""The engine on a real NVIDIA GPU (gpu-marked: skipped without one; run by benchmarks/gpu_checks.sh)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.train import TrainingFailed, fit

from .run_events import events_of
from .test_train_ddp import seen, torchrun
from .train_models import blobs, loader, mlp

pytestmark = pytest.mark.gpu


def test_nccl_with_one_rank_under_torchrun(tmp_path):
    finished = torchrun("cuda", tmp_path, nproc=1)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rank0 = seen(tmp_path, 0)
    assert rank0["status"] == "succeeded"
    (run,) = RunStore().list()
    events = read_events(RunFiles.of(run.id).events)[0]
    start = next(e for e in events if e["kind"] == "start")
    assert (start["backend"], start["device"], start["strategy"]) == ("nccl", "cuda:0", "ddp")
    assert all(e["mem_peak"] > 0 for e in events if e["kind"] == "step")


def test_auto_precision_on_cuda_and_memory_in_events():
    model = mlp()
    result = fit(
        model, torch.optim.AdamW(model.parameters(), 1e-2), loader(blobs()), loss_fn=nn.CrossEntropyLoss(), epochs=3
    )
    start = events_of(result, "start")[0]
    assert start["device"].startswith("cuda") and start["amp"] == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert next(model.parameters()).is_cuda


def test_out_of_memory_is_one_line_and_the_gpu_stays_usable():
    def greedy(model, batch):
        torch.empty(2**40, device="cuda")  # 1 TiB
        return model(batch[0]).sum()

    model = mlp()
    with pytest.raises(TrainingFailed) as failure:
        fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), train_step=greedy)
    message = failure.value.result.message
    assert message.startswith("CUDA out of memory at step 1") and "--accum" in message and "\n" not in message
    assert torch.cuda.memory_reserved() < 2**30
    again = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    assert again.status == "succeeded"


class SlowDataset(Dataset):
    def __init__(self):
        self.data = blobs(2048)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        time.sleep(0.001)
        return self.data[index]


def test_an_input_bound_cuda_run_gets_loader_advice():
    model = mlp()
    result = fit(
        model,
        torch.optim.SGD(model.parameters(), 0.1),
        DataLoader(SlowDataset(), batch_size=32),
        loss_fn=nn.CrossEntropyLoss(),
        max_steps=40,
        log_every=5,
        save_ckpts=False,
    )
    (advice,) = events_of(result, "advice")
    for setting in ("num_workers=", "pin_memory=True", "persistent_workers=True", "prefetch_factor="):
        assert setting in advice["message"]


class NanAt(nn.Module):
    """An MLP whose output is NaN at one training step."""

    def __init__(self, bad_step: int):
        super().__init__()
        self.net, self.bad_step, self.calls = mlp(), bad_step, 0

    def forward(self, x):
        out = self.net(x)
        self.calls += self.training
        return out * float("nan") if self.calls == self.bad_step else out


def test_a_nan_on_cuda_keeps_the_good_checkpoints():
    """The check before each checkpoint on CUDA tensors (bf16/fp16 autocast): nothing after the NaN saved."""
    from jiyu_magics.train.checkpoint import load_checkpoint

    model = NanAt(bad_step=12)
    with pytest.raises(TrainingFailed) as failure:
        fit(
            model,
            torch.optim.AdamW(model.parameters(), 1e-2),
            loader(blobs(512)),
            loss_fn=nn.CrossEntropyLoss(),
            epochs=1,
            ckpt_every=1,
        )
    result = failure.value.result
    assert result.step == 12 and "(step 11)" in result.message
    state = load_checkpoint(result.checkpoints[-1])
    assert state["step"] == 11 and all(
        torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point()
    )


def test_a_device_that_is_not_there_is_one_line():
    from jiyu_magics.train import TrainConfigError

    model = mlp()
    beyond = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(TrainConfigError, match=f"^device {beyond}: only {torch.cuda.device_count()} CUDA device"):
        fit(
            model,
            torch.optim.AdamW(model.parameters(), 1e-2),
            loader(blobs()),
            loss_fn=nn.CrossEntropyLoss(),
            device=beyond,
        )
