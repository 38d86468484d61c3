"""``%%train --nproc`` on real GPUs, as issue 17 lists what no GPU has run yet: FSDP over NCCL
(trains; its checkpoint loads in a single process; the weights come back to the kernel),
``--amp bf16`` with ``--accum`` under DDP, and the out-of-memory advice from inside a rank.
Real kernel-side shell, real torchrun, NCCL. Each test appends its figure (steps/s, peak
memory) to test-artifacts/gpu_figures.txt, which benchmarks/gpu_checks.sh prints."""

from __future__ import annotations

import time

import pytest

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.train.checkpoint import load_checkpoint

from .conftest import ARTIFACTS
from .jobs_workload import processes_of

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torchrun_tmp")]

DATA = """import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
X = torch.randn(4096, 64); y = torch.randint(0, 10, (4096,))
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
"""
BODY = """
optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
train_loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
loss_fn = torch.nn.CrossEntropyLoss()
"""


def figure(line: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "gpu_figures.txt", "a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def events(run_id: str, kind: str) -> list[dict]:
    return [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == kind]


def rate_and_peak(run_id: str) -> str:
    steps = events(run_id, "step")
    rate = steps[-1].get("samples_per_s")
    peak = max((e.get("mem_peak") or 0) for e in steps)
    return f"{rate} samples/s, peak memory {peak / 2**20:.0f} MiB"


def test_fsdp_over_nccl_trains_its_checkpoint_loads_in_one_process_and_weights_come_back(ip, tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    ip.run_cell(DATA)
    ip.run_cell_magic("train", "--nproc 1 --strategy fsdp --max-steps 40 --name fsdp-nccl", BODY)
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 40
    (start,) = events(result.run_id, "start")
    assert (start["strategy"], start["backend"]) == ("fsdp", "nccl")
    assert result.last_checkpoint.endswith(".dcp"), "sharded: a DCP folder"
    single = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    single.load_state_dict(load_checkpoint(result.last_checkpoint)["model"])  # one process, no FSDP, no GPU
    kernel = ip.user_ns["model"].state_dict()
    assert all(torch.equal(v.cpu(), kernel[k].cpu()) for k, v in single.state_dict().items())
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert processes_of(result.run_id) == []
    figure(f"fsdp over nccl, 1 rank: {rate_and_peak(result.run_id)}")
    # the kernel itself (one process, on the GPU) resumes what the NCCL rank saved in shards
    ip.run_cell_magic("train", "--max-steps 44 --resume last --name fsdp-nccl", BODY)
    resumed = ip.user_ns["train_result"]
    assert (resumed.status, resumed.step) == ("succeeded", 44)
    (start,) = events(resumed.run_id, "start")
    assert (start["resumed_from"], start["start_step"]) == (result.last_checkpoint, 40)


def test_bf16_with_accumulation_under_ddp(ip, tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    nproc = min(2, torch.cuda.device_count())
    ip.run_cell(DATA)
    ip.run_cell_magic("train", f"--nproc {nproc} --amp bf16 --accum 2 --max-steps 30 --name ddp-bf16", BODY)
    result = ip.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 30
    (start,) = events(result.run_id, "start")
    assert (start["amp"], start["accum"], start["nproc"], start["backend"]) == ("bf16", 2, nproc, "nccl")
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert processes_of(result.run_id) == []
    figure(f"ddp bf16 accum 2, {nproc} rank(s): {rate_and_peak(result.run_id)}")


def test_out_of_memory_inside_a_rank_is_one_line_with_the_advice(ip, tmp_path, monkeypatch):
    from jiyu_magics.magics.ddp_launch import RankFailure

    monkeypatch.chdir(tmp_path)
    ip.run_cell(DATA)
    greedy = (
        BODY
        + """
def train_step(model, batch):
    torch.empty(2**40, device="cuda")  # 1 TiB
    return loss_fn(model(batch[0]), batch[1])
"""
    )
    started = time.time()
    with pytest.raises(RankFailure) as failure:
        ip.run_cell_magic("train", "--nproc 1 --max-steps 10 --name ddp-oom", greedy)
    message = str(failure.value)
    assert "out of memory at step 1" in message and "--accum" in message and "\n" not in message
    figure(f"oom inside a rank: reported in {time.time() - started:.1f} s: {message[:160]}")


def test_fsdp_against_ddp_per_gpu_memory_on_the_same_model(ip, tmp_path, monkeypatch):
    """The figure FSDP exists for: per-GPU peak memory of the same model (67 M parameters,
    AdamW) under --strategy fsdp and ddp, on as many GPUs as there are (up to 4; on one GPU
    nothing is sharded and both hold everything), each saving its checkpoints its own way."""
    import torch

    monkeypatch.chdir(tmp_path)
    nproc = min(4, torch.cuda.device_count())
    ip.run_cell(DATA.replace("torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)", WIDE))
    peaks = {}
    for strategy in ("fsdp", "ddp"):
        line = f"--nproc {nproc} --strategy {strategy} --max-steps 20 --ckpt-every 10 --log-every 5"
        ip.run_cell_magic("train", f"{line} --name mem-{strategy}", BODY)
        result = ip.user_ns["train_result"]
        assert result.status == "succeeded" and result.step == 20
        assert result.last_checkpoint.endswith(".dcp" if strategy == "fsdp" else ".pt")
        peaks[strategy] = max((e.get("mem_peak") or 0) for e in events(result.run_id, "step"))
        figure(f"{strategy}, {nproc} GPU(s), 67 M params: {rate_and_peak(result.run_id)} per GPU")
    if nproc > 1:
        assert peaks["fsdp"] < peaks["ddp"], peaks


WIDE = (
    "torch.nn.Linear(64, 4096), torch.nn.ReLU(), *[torch.nn.Linear(4096, 4096) for _ in range(4)], "
    "torch.nn.Linear(4096, 10)"
)
