"""A small real DDP workload for the jobs tests: plain torch + gloo, progress written to the
run's event log by rank 0, checkpoints written atomically, resuming from the last checkpoint
when torchrun restarted the workers (the convention the training engine follows).

It stands in for a ``%%train`` notebook until the engine and the jobs branch are merged.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

PARAMETERS = """\
steps = 12
step_seconds = 0.05
ckpt_every = 4
fail_rank = -1      # this rank raises at fail_step
fail_step = 3
"""

TRAIN = """\
import os, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
run = RunFiles.of(os.environ["JIYU_RUN_ID"])
torch.manual_seed(0)
x = torch.randn(512, 8)
y = x @ torch.linspace(-1, 1, 8).unsqueeze(1)
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
ckpt = run.ckpt / "last.pt"
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
first = 1
if restart > 0 and ckpt.exists():
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    first = state["step"] + 1
events = EventLog(run.events) if rank == 0 else None
if events:
    events.append("start", total_steps=steps, first_step=first, restart=restart, world_size=world)
for step in range(first, steps + 1):
    if rank == fail_rank and step == fail_step:
        raise RuntimeError(f"rank {rank} gave up at step {step}")
    loss = torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(step_seconds)
    if events:
        events.append("step", step=step, loss=loss.item(), restart=restart)
    if rank == 0 and step % ckpt_every == 0:
        tmp = ckpt.with_name(".last.pt.tmp")
        with open(tmp, "wb") as f:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, ckpt)
        events.append("ckpt", step=step, path=str(ckpt))
if events:
    events.append("end", status="succeeded", step=steps)
dist.destroy_process_group()
print(f"rank {rank} done")
"""


TRAIN_CELL = """%%train --max-steps {steps} --ckpt-every 4 --log-every 1 --seed 0 --name elastic
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), 0.05)
train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)

def train_step(model, batch):
    time.sleep(step_seconds)
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)
"""


def write_train_notebook(path):
    """A job notebook that trains with ``%%train`` (checkpoints every 4 steps, a step takes
    ``step_seconds``): the engine's own events, stop and restarts."""
    params = new_code_cell("steps = 30\nstep_seconds = 0.15")
    params.metadata["tags"] = ["parameters"]
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("%load_ext jiyu_magics"),
                params,
                new_code_cell(
                    "import time, torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
                    "torch.manual_seed(0)\nX = torch.randn(1024, 8); y = X.sum(1, keepdim=True)"
                ),
                new_code_cell(TRAIN_CELL),
            ]
        ),
        path,
    )
    return path


def parameters(**overrides) -> str:
    """The parameters cell with some values changed (``steps=40``)."""
    lines = []
    for line in PARAMETERS.splitlines():
        name = line.split("=")[0].strip()
        lines.append(f"{name} = {overrides[name]!r}" if name in overrides else line)
    return "\n".join(lines) + "\n"


def write_notebook(path: Path, **overrides) -> Path:
    """A notebook a researcher could have written: a title, a parameters cell, a shell
    command the job must leave out, and the training cell."""
    cells = [
        new_markdown_cell("# DDP smoke workload"),
        new_code_cell(parameters(**overrides)),
        new_code_cell("!nvidia-smi\n%matplotlib inline"),
        new_code_cell(TRAIN),
    ]
    cells[1].metadata["tags"] = ["parameters"]
    nb = new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nbformat.write(nb, path)
    return path


def write_script(path: Path, **overrides) -> Path:
    """The same workload as a plain script, for the launcher (no notebook involved)."""
    path.write_text(parameters(**overrides) + TRAIN)
    return path


def wait_for(predicate, timeout: float = 120.0, every: float = 0.2, what: str = "condition"):
    """Polls ``predicate`` until it returns something truthy; fails the test on timeout."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def finished(run_id: str, timeout: float = 180.0):
    """The run's store row once it is no longer active (succeeded, failed, stopped, lost)."""
    from jiyu_magics.core.store.run_store import RunStore

    return wait_for(
        lambda: (lambda r: r if not r.active else None)(RunStore().get(run_id)), timeout, what=f"run {run_id} to end"
    )


def processes_of(run_id: str) -> list[int]:
    """Pids of every live process carrying the run id, read from the process table directly
    (not through the code under test)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get("JIYU_RUN_ID") == run_id:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def steps_logged(run_id: str) -> list[dict]:
    from jiyu_magics.core.events.log import read_events
    from jiyu_magics.core.runs.files import RunFiles

    return [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "step"]


def assert_no_processes(run_id: str, within: float = 10.0) -> None:
    """No process of the run is left, at the latest ``within`` seconds from now (a supervisor
    takes a moment to exit after recording the end)."""
    try:
        wait_for(lambda: processes_of(run_id) == [], within, every=0.1, what=f"no process of run {run_id}")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; left: {describe_processes(processes_of(run_id))}") from None


def describe_processes(pids: list[int]) -> str:
    """Each pid with its parent, state and command line: what a timed-out wait names."""
    import psutil

    described = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            described.append(f"{pid} (parent {proc.ppid()}, {proc.status()}): {' '.join(proc.cmdline())[:160]}")
        except psutil.Error:
            described.append(f"{pid} (gone)")
    return "; ".join(described) or "none"
