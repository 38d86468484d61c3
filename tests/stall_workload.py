"""A 2-rank ``fit`` whose rank 1 stops stepping: it sleeps before the collective of its
backward pass at step ``STALL_AT``, so rank 0 waits in gloo's all-reduce for ever. Used by the
stall tests (the lifecycle's watch, ``jiyu stacks``, ``%jobs``, the panel)."""

STALL_AT = 12

SCRIPT = """\
import os, time
import torch
from jiyu_magics.train.engine import fit

RANK = int(os.environ["RANK"])
torch.manual_seed(0)
x, y = torch.randn(4096, 8), torch.randn(4096, 1)
model = torch.nn.Linear(8, 1)
calls = 0


def train_step(model, batch):
    global calls
    calls += 1
    if RANK == 1 and calls == {stall_at}:
        time.sleep(600)  # rank 1 stalls here, before the all-reduce of its backward
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)


fit(model, torch.optim.SGD(model.parameters(), lr=0.01), (x, y), batch_size=8, epochs=1,
    train_step=train_step, log_every=1, stall_timeout={timeout}, save_ckpts=False)
"""


def stall_script(timeout: float = 3.0, stall_at: int = STALL_AT) -> str:
    return SCRIPT.format(timeout=timeout, stall_at=stall_at)


SLEEP_LINE = (
    SCRIPT.splitlines().index("        time.sleep(600)  # rank 1 stalls here, before the all-reduce of its backward")
    + 1
)
