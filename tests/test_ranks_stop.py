"""A stop is never a death, through a real kernel (jupyter_client) and gloo on the CPU: the stop
button (the kernel's interrupt) on a ``%%train`` on a pool whose rank 1 hangs in Python in the
middle of a step ends the training in seconds, ``stopped`` with no error as its message, and
kills nothing: the same rank processes keep their state; and a ``%%ranks`` cell where one rank
waits in a collective that another never enters is reported stalled though no rank finished."""

from __future__ import annotations

import time

import pytest

from jiyu_magics.core.runs.files import store_path
from jiyu_magics.core.store.run_store import RunStore

from .jobs_workload import wait_for
from .test_ranks import Kernel, alive, pool_of, rank_pids

SLOW_RANK = """\
import time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
rank = dist.get_rank()
kept = torch.full((3,), float(rank))

class Hangs(torch.nn.Module):
    # rank 1 hangs in plain Python at its 4th forward (a stuck data loader, a lock)
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if rank == 1 and self.calls == 4:
            time.sleep(300)
        return self.layer(x)

X, Y = torch.randn(4096, 4), torch.randn(4096, 1)
"""

TRAIN = """\
%%train --nproc 2 --epochs 1 --stall-timeout 3 --name stuck-step
model = Hangs()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.MSELoss()
train_loader = DataLoader(TensorDataset(X, Y), batch_size=8)
"""


@pytest.fixture
def kernel(tmp_path):
    kernel = Kernel(tmp_path, tmp_path / "home", env={"TMPDIR": str(tmp_path)})
    started = kernel.run("%load_ext jiyu_magics\n%ranks start 2 --device cpu --name stops")
    assert started.status == "ok", started.text + str(started.errors)
    yield kernel
    kernel.run("%ranks stop")
    kernel.close()


def test_the_stop_button_on_a_stalled_training_stops_it_and_kills_no_rank(kernel):
    defined = kernel.run(f"%%ranks\n{SLOW_RANK}")
    assert defined.status == "ok", defined.errors
    pool = pool_of(kernel.home)
    pids = rank_pids(kernel.home, pool.id)
    msg = kernel.start(TRAIN)
    store = RunStore(store_path(kernel.home))

    def training():
        return next((run for run in store.list() if run.name == "stuck-step"), None)

    wait_for(lambda: training() is not None and training().stalled_since is not None, 120, what="the stall flag")
    began = time.monotonic()
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=120)
    took = time.monotonic() - began
    run = training()
    assert run.status == "stopped" and run.error.startswith("stopped at step 3 by request"), (run.error, cell.text)
    print(f"the stop took {took:.1f} s")
    assert took < 10, f"the stop took {took:.1f} s"
    assert "died" not in cell.text and "SIGKILL" not in cell.text, cell.text
    assert alive(pids) == pids and rank_pids(kernel.home, pool.id) == pids, "the same rank processes"
    after = kernel.run("%%ranks --all-output\nprint('kept', rank, kept.tolist(), model.calls >= 3)")
    assert after.status == "ok", after.errors
    assert sorted(after.text.splitlines()) == [
        "[rank0] kept 0 [0.0, 0.0, 0.0] True",
        "[rank1] kept 1 [1.0, 1.0, 1.0] True",
    ]
    assert pool_of(kernel.home).status == "running"


def test_a_hang_where_no_rank_finished_is_reported_after_the_stall_timeout(kernel):
    """Rank 0 waits in an all_reduce; rank 1 sleeps before it, so neither has finished the cell:
    the stall notice names the collective rank 0 waits in and rank 1 still running."""
    assert kernel.run("%%ranks\nimport time, torch, torch.distributed as dist\nrank = dist.get_rank()").status == "ok"
    msg = kernel.start("%%ranks --stall-timeout 2\nif rank == 1:\n    time.sleep(300)\ndist.all_reduce(torch.ones(3))")
    said = kernel.read_until(msg, "the stop button ends the cell", timeout=60)
    assert "jiyu: stalled: rank 0 waits in a collective that rank 1 has not entered, 2 s into the cell" in said, said
    assert "rank 0 waits in all_reduce #" in said and "rank 1 is still running the cell (not in a collective)" in said
    kernel.manager.interrupt_kernel()
    cell = kernel.wait(msg, timeout=60)
    assert [error["evalue"] for error in cell.errors] == ["rank 1: KeyboardInterrupt"], cell.errors
    assert kernel.run("%%ranks\nprint('fine')").text == "fine\n"
