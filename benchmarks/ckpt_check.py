"""What the NaN check before each checkpoint costs, against the checkpoint it guards.

Before every checkpoint the engine checks the pending losses and every floating-point parameter
and buffer that started finite for NaN/Inf (``train.finite_check``), so a non-finite state is never written. Nothing
runs per step; this measures the check against the atomic save it precedes (``save_atomic``:
``torch.save`` of model and AdamW state, fsync, rename), for models of a few sizes. Check and
save alternate (A B A B ...), and we print medians and the ratio check/save per model.

    python benchmarks/ckpt_check.py [--device cpu|cuda] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from jiyu_magics.train.checkpoint import FORMAT, save_atomic
from jiyu_magics.train.finite_check import FiniteGuard

MODELS = {  # name -> (width, depth): parameter tensors = 2 * depth (+ BatchNorm's)
    "digits CNN-size (0.03 M)": (64, 4),
    "MLP 4 M, 16 tensors": (1024, 4),
    "MLP 17 M, 64 tensors": (512, 64),
}


def model_of(width: int, depth: int, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    layers = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)]
    model = nn.Sequential(*layers, nn.BatchNorm1d(width)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
    model(torch.randn(8, width, device=device)).sum().backward()
    optimizer.step()  # AdamW's moments exist, as in a checkpoint mid-run
    return model, optimizer


def timed(action, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    action()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def measure(name: str, width: int, depth: int, device: torch.device, repeat: int, folder: Path) -> None:
    model, optimizer = model_of(width, depth, device)
    losses = [torch.rand((), device=device) for _ in range(50)]  # the losses pending since the last log
    state = {"format": FORMAT, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
    guard, checks, saves = FiniteGuard(model), [], []
    for index in range(repeat + 1):
        path = folder / f"step-{index:08d}.pt"
        check = timed(lambda: guard.holds(losses), device)
        save = timed(lambda path=path: save_atomic(state, path), device)
        if index:  # the first pair warms caches and the allocator
            checks.append(check)
            saves.append(save)
    ratios = sorted(c / s for c, s in zip(checks, saves, strict=False))
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{name:28s} {params / 1e6:6.2f} M params · check {statistics.median(checks) * 1e3:7.2f} ms · "
        f"save {statistics.median(saves) * 1e3:8.2f} ms · check/save median {statistics.median(ratios):.1%} "
        f"(range {ratios[0]:.1%}-{ratios[-1]:.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device {device}, torch {torch.__version__}, {args.repeat} repetitions, medians")
    with tempfile.TemporaryDirectory() as folder:
        for name, (width, depth) in MODELS.items():
            measure(name, width, depth, device, args.repeat, Path(folder))


if __name__ == "__main__":
    main()
