"""Stall diagnosis that does not mislead (issue 24, group 8), each through its real entry point
(``jiyu submit``/``jiyu stacks``/``jiyu stop``, ``%%train --nproc`` in a real kernel through
nbclient) on real 2-rank gloo torchrun runs: a rank stopped with SIGSTOP is shown stopped
(process state T), not "outside Python"; a long validation is progress; ``jiyu stacks`` right
after the flag finds the dump; a stop of a stalled cell shows one line, not torchrun's report."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, finished, wait_for
from .stall_workload import stall_script

SLEEP = "time.sleep(600)  # rank 1 stalls here, before the all-reduce of its backward"


def submitted(tmp_path: Path, source: str, *options: str) -> str:
    path = tmp_path / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), path)
    done = jiyu("submit", str(path), "--gpus", "0", *(options if "--nproc" in options else ("--nproc", "2", *options)))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]


def stall_event(run_id: str) -> dict:
    return wait_for(
        lambda: [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "stall"],
        120,
        what="the stall event",
    )[0]


def test_a_rank_stopped_with_sigstop_is_shown_stopped_not_outside_python(tmp_path, torchrun_tmp, no_schedulers):
    source = stall_script(timeout=None).replace(SLEEP, "os.kill(os.getpid(), __import__('signal').SIGSTOP)")
    run_id = submitted(tmp_path, source, "--stall-timeout", "3", "--name", "sigstopped")
    try:
        stall_event(run_id)
        stacks = jiyu("stacks", run_id)
        assert stacks.returncode == 0, stacks.stderr
        assert "  rank 1 is stopped (process state T, by SIGSTOP or Ctrl-Z)" in stacks.stdout, stacks.stdout
        assert "outside Python" not in stacks.stdout and "  rank 0 is in " in stacks.stdout, stacks.stdout
    finally:
        stopped = jiyu("stop", run_id, "--grace", "2")
    assert stopped.returncode == 0, stopped.stderr
    assert finished(run_id, 60).status in ("stopped", "failed")
    assert RunStore().get(run_id).stalled is False
    assert_no_processes(run_id)


SLOW_VALIDATION = """\
import time, torch
from jiyu_magics.train.engine import fit


class SlowValidation(torch.utils.data.Dataset):
    def __len__(self):
        return 30

    def __getitem__(self, i):
        time.sleep(0.2)  # 6 s per validation pass, twice the job's 3 s stall timeout
        return torch.randn(8), torch.randn(1)


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
fit(model, torch.optim.SGD(model.parameters(), lr=0.01), (torch.randn(64, 8), torch.randn(64, 1)),
    batch_size=8, epochs=2, loss_fn=torch.nn.functional.mse_loss, log_every=1, save_ckpts=False,
    val_data=torch.utils.data.DataLoader(SlowValidation(), batch_size=2))
"""


def test_a_validation_longer_than_the_stall_timeout_is_progress_not_a_stall(tmp_path, torchrun_tmp, no_schedulers):
    """A scaled-down 60 s validation under --stall-timeout 30: 6 s under 3 s."""
    run_id = submitted(tmp_path, SLOW_VALIDATION, "--nproc", "1", "--stall-timeout", "3", "--name", "slow-val")
    run = finished(run_id, 120)
    events = read_events(RunFiles.of(run_id).events)[0]
    kinds = [e["kind"] for e in events]
    assert run.status == "succeeded", (run.error, kinds)
    assert kinds.count("val") == 2 and "val_progress" in kinds, kinds
    assert "stall" not in kinds, [e for e in events if e["kind"] == "stall"]
    assert "stalled" not in jiyu("logs", run_id).stdout


def test_jiyu_stacks_right_after_the_stall_flag_shows_every_ranks_stack(tmp_path, torchrun_tmp, no_schedulers):
    """The flag follows the dump: whoever sees the run stalled finds the whole dump, never the
    header alone (the dump takes seconds: the ranks write, py-spy attaches)."""
    run_id = submitted(tmp_path, stall_script(timeout=None), "--stall-timeout", "3", "--name", "flag-then-stacks")
    try:
        wait_for(lambda: RunStore().get(run_id).stalled, 120, every=0.05, what="the stall flag")
        stacks = jiyu("stacks", run_id)
        assert stacks.returncode == 0, stacks.stderr
        headlines = [line for line in stacks.stdout.splitlines() if line.startswith("  rank ")]
        assert len(headlines) == 2 and "  rank 1 is in train_step" in stacks.stdout, stacks.stdout
    finally:
        stopped = jiyu("stop", run_id, "--grace", "2")
    assert stopped.returncode == 0, stopped.stderr
    assert_no_processes(run_id)


NPROC_DATA = """%load_ext jiyu_magics
import os, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
X = torch.randn(512, 8); y = X.sum(1, keepdim=True)
model = torch.nn.Linear(8, 1)"""

STALLING_CELL = """%%train --nproc 2 --epochs 1000 --log-every 1 --stall-timeout 3 --name stalls-in-cell
optimizer = torch.optim.SGD(model.parameters(), 0.01)
train_loader = DataLoader(TensorDataset(X, y), batch_size=8)
calls = 0

def train_step(model, batch):
    global calls
    calls += 1
    if os.environ.get("RANK") == "1" and calls == 12:
        time.sleep(600)  # rank 1 stalls before its backward's all-reduce
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)
"""


def stalled_cell(tmp_path, jiyu_home, while_stalled):
    """Runs the stalling ``%%train --nproc 2`` cell in a real kernel (nbclient, widget state
    kept), calls ``while_stalled(run_id, client)`` once the run is flagged, and returns the cell."""
    import asyncio

    from nbclient import NotebookClient

    from .notebook_runner import first_logged_step, notebook

    nb = notebook(NPROC_DATA, STALLING_CELL)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", store_widget_state=True, resources={"metadata": {"path": str(tmp_path)}}
    )

    async def run():
        async with client.async_setup_kernel():
            await client.async_execute_cell(nb.cells[0], 0)
            training = asyncio.ensure_future(client.async_execute_cell(nb.cells[1], 1))
            loop = asyncio.get_running_loop()
            run_id = await loop.run_in_executor(None, first_logged_step, jiyu_home)
            await loop.run_in_executor(
                None, lambda: wait_for(lambda: RunStore().get(run_id).stalled, 120, what="the stall flag")
            )
            result = await loop.run_in_executor(None, while_stalled, run_id, client)
            await training
            client.set_widgets_metadata()  # the widgets' state (the ranks' pane) into the notebook
            return run_id, result

    run_id, result = asyncio.run(run())
    return nb, run_id, result


def test_jiyu_stop_of_a_stalled_train_nproc_cell_shows_one_line_not_torchruns_traceback(tmp_path, jiyu_home):
    from .notebook_runner import text_of, widget_html

    nb, run_id, stopped = stalled_cell(tmp_path, jiyu_home, lambda run_id, _: jiyu("stop", run_id, "--grace", "2"))
    assert stopped.returncode == 0, stopped.stderr
    pane = widget_html(nb, "jiyu-rank-output")
    assert pane and "[rank0] run " in pane[0], "the ranks' pane, read from the saved widget state"
    shown = text_of(nb.cells[1]) + "".join(pane)
    assert "ChildFailedError" not in shown and "Traceback" not in shown, shown[-3000:]
    assert "stopped at step 11 by request" in text_of(nb.cells[1]), shown[-3000:]
    assert RunStore().get(run_id).status == "stopped"
    assert_no_processes(run_id)


def test_a_stalled_train_nproc_cells_dashboard_says_stalled_with_the_stacks_headline(tmp_path, jiyu_home):
    """The dashboard froze at "running · ETA 0:01": it now says stalled, as the panel does."""

    def html_values(client) -> list[str]:
        """The live HTML widgets of the kernel, as the front-end holds them (nbclient keeps them)."""
        states = [dict(state) for state in list(client.widget_state.values())]  # comm id -> the model's state
        return [st.get("value", "") for st in states if st.get("_model_name") == "HTMLModel"]

    def elapsed_label(client) -> str:
        states = [dict(state) for state in list(client.widget_state.values())]
        return next(st["value"] for st in states if st.get("_model_name") == "LabelModel" and "elapsed" in st["value"])

    def seen_while_stalled(run_id, client):
        try:
            values = wait_for(
                lambda: (
                    [v for v in html_values(client) if "⚠ stalled: no step since step" in v]
                    and [v for v in html_values(client) if v.startswith("<b>stalled</b>")]
                ),
                60,
                what="the dashboard's stall line",
            ) and html_values(client)
            frozen = elapsed_label(client)
            moved = wait_for(lambda: (lambda now: now if now != frozen else None)(elapsed_label(client)), 15)
            return values, (frozen, moved)
        finally:
            jiyu("stop", run_id, "--grace", "2")

    _, run_id, (values, clock) = stalled_cell(tmp_path, jiyu_home, seen_while_stalled)
    # no step comes while it is stalled; the elapsed time goes on (it froze with the last step)
    assert clock[0].split(" · ")[0] == clock[1].split(" · ")[0], clock
    shown = [c.rsplit("elapsed ", 1)[1].split(":") for c in clock]  # m:ss
    assert [int(m) * 60 + int(s) for m, s in shown] == sorted({int(m) * 60 + int(s) for m, s in shown}), clock
    note = next(v for v in values if "⚠ stalled: no step since step" in v)
    assert "⚠ stalled: no step since step 11 · " in note, note
    assert "rank 1 is in train_step (the current cell, line 10)" in note, note
    assert any(v.startswith("<b>stalled</b> · ") for v in values), "the header says stalled, not running"
    assert f"jiyu stacks {run_id}" in note
    assert_no_processes(run_id)
