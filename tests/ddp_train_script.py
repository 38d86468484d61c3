"""A training script for the torchrun tests: ``torchrun ... ddp_train_script.py MODE OUT``.

Each sample carries its index, and ``train_step`` records the indices each rank trains on
(epoch 1) into ``OUT/seen-<rank>.json``, so the test can check the ranks' shards.
MODE: ``loader`` (a shuffling DataLoader, accumulation 2), ``fast`` (the tensor fast path),
``fsdp`` (``strategy="fsdp"``), ``raise`` (rank 1 raises at its third step), ``caught`` (every
rank raises at its third step, the script catches it, then rank 1 raises an error of its own),
``long`` (runs until stopped), ``cuda`` (NCCL).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jiyu_magics.train import fit

mode, out = sys.argv[1], Path(sys.argv[2])
rank = int(os.environ["RANK"])
torch.manual_seed(0)
x = torch.randn(256, 20)
data = TensorDataset(torch.arange(256), x, (x[:, 0] > 0).long())
seen: list[int] = []
steps = {"n": 0}


def train_step(model, batch):
    ids, inputs, labels = batch
    steps["n"] += 1
    if mode == "raise" and rank == 1 and steps["n"] == 3:
        raise ValueError("boom on rank 1")
    if mode == "caught" and steps["n"] == 3:
        raise ValueError(f"boom on rank {rank}, which the script catches")
    if len(seen) < 256 // dist.get_world_size():
        seen.extend(ids.tolist())
    return nn.functional.cross_entropy(model(inputs), labels)


model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
options = dict(epochs=4, seed=1, log_every=2)
if mode == "loader":
    train = DataLoader(
        data, batch_size=16, shuffle=True, collate_fn=lambda b: [torch.stack(t) for t in zip(*b, strict=False)]
    )
    options["accum"] = 2
elif mode == "fsdp":
    train, options["strategy"] = DataLoader(data, batch_size=16, shuffle=True), "fsdp"
elif mode == "long":
    train, options["epochs"] = DataLoader(data, batch_size=16, shuffle=True), 100_000
elif mode == "cuda":
    train, options["device"] = DataLoader(data, batch_size=16, shuffle=True, pin_memory=True), "cuda"
else:
    train = DataLoader(data, batch_size=16, shuffle=True)
if mode == "caught":
    try:
        fit(model, optimizer, train, train_step=train_step, **options)
    except ValueError:
        pass
    if rank == 1:
        raise RuntimeError("the script's own error on rank 1, after fit")
    sys.exit(0)
result = fit(model, optimizer, train, train_step=train_step, **options)
(out / f"seen-{rank}.json").write_text(
    json.dumps(
        {
            "seen": seen,
            "status": result.status,
            "step": result.step,
            "history": result.history,
            "last": result.last_checkpoint,
        }
    )
)
