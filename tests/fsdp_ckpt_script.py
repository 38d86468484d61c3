"""``torchrun ... fsdp_ckpt_script.py PLAN.json``: ``fit`` calls under ``strategy="fsdp"`` for
the sharded-checkpoint tests, one after another in the same ranks.

PLAN: ``{"out": DIR, "calls": [{"name", "resume", "max_steps", "ckpt_dir", "ckpt_every",
"keep_ckpts"}, ...]}``. Each call trains a freshly built (same seed) model with AdamW and
a per-step LR schedule on tensor data (the engine's batched gather: the same global sample order
on any number of ranks). Rank 0 writes ``OUT/<name>.json`` (status, step, loss per step,
checkpoints; for a call ``fit`` refused, ``{"refused": LINE}``), and every rank takes part in
gathering the full model and optimizer state as it is in memory after the call, which rank 0
saves to ``OUT/<name>-state.pt``: what a checkpoint must hold, bit for bit. The script owns the
process group, so it outlives each ``fit`` for the gathering.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

from jiyu_magics.train import TrainConfigError, fit, leave_process_group

plan = json.loads(Path(sys.argv[1]).read_text())
out = Path(plan["out"])
dist.init_process_group("gloo")
torch.manual_seed(0)
x = torch.randn(384, 24)
y = (x[:, :3].sum(dim=1) > 0).long()


def build() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Dropout(0.1), nn.Linear(48, 40), nn.ReLU(), nn.Linear(40, 3))
    optimizer = torch.optim.AdamW(model.parameters(), 5e-3, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    return model, optimizer, scheduler


for call in plan["calls"]:
    model, optimizer, scheduler = build()
    options = {k: call[k] for k in ("resume", "max_steps", "ckpt_dir", "ckpt_every", "keep_ckpts") if k in call}
    try:
        result = fit(
            model,
            optimizer,
            (x, y),
            batch_size=16,
            loss_fn=nn.CrossEntropyLoss(),
            scheduler=scheduler,
            strategy="fsdp",
            seed=3,
            log_every=1,
            name=call["name"],
            **options,
        )
    except TrainConfigError as refused:  # every rank refuses alike (a damaged checkpoint): on to the next call
        if dist.get_rank() == 0:
            (out / f"{call['name']}.json").write_text(json.dumps({"refused": str(refused)}))
        continue
    full = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        dumped = {"model": full[0], "optimizer": full[1], "lr": scheduler.get_last_lr()}
        torch.save(dumped, out / f"{call['name']}-state.pt")
    if dist.get_rank() == 0:
        losses = {row["step"]: row["loss"] for row in result.history if row.get("loss") is not None}
        record = {"status": result.status, "step": result.step, "losses": losses, "checkpoints": result.checkpoints}
        (out / f"{call['name']}.json").write_text(json.dumps({**record, "run_id": result.run_id}))
leave_process_group()  # as fit leaves a group it made: the interpreter ends with gloo's workers idle
