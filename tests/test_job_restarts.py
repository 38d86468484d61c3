"""``--max-restarts`` resumes the right cell: a job notebook with two ``%%train`` cells, rank 1
SIGKILLed during the second. torchrun restarts the workers and the script replays from the top:
the first call, which had finished, restores its own final weights at once (nothing retrained),
and the second resumes from its own last checkpoint, never from the other call's. Both with the
two models of the same shapes (where a mix-up trains on silently with wrong weights) and of
different shapes (where it fails with "does not fit this model")."""

from __future__ import annotations

import os
import signal

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.jobs.process import rank_records

from .jobs_workload import assert_no_processes, finished, wait_for

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

DATA = (
    "import os, time, torch\nfrom torch.utils.data import DataLoader, TensorDataset\ntorch.manual_seed(0)\n"
    "X = torch.randn(1024, 8); y = X.sum(1, keepdim=True)\n"
    "def train_step(model, batch):\n    time.sleep(0.05)\n    inputs, targets = batch\n"
    "    return torch.nn.functional.mse_loss(model(inputs), targets)"
)
SAVE_FIRST = (
    "if os.environ['RANK'] == '0':  # the first call's weights, as each attempt left them\n"
    "    torch.save(model.state_dict(), f\"first-{os.environ['TORCHELASTIC_RESTART_COUNT']}.pt\")"
)


def train_cell(name: str, width: int, steps: int) -> str:
    return f"""%%train --max-steps {steps} --ckpt-every 10 --log-every 2 --seed 0 --name {name}
model = torch.nn.Sequential(torch.nn.Linear(8, {width}), torch.nn.Linear({width}, 1))
optimizer = torch.optim.SGD(model.parameters(), 0.01)
train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)"""


def calls(events: list[dict]) -> list[list[dict]]:
    """The events of each fit call, in order (a call begins with its start)."""
    found: list[list[dict]] = []
    for event in events:
        if event["kind"] == "start":
            found.append([])
        if found:
            found[-1].append(event)
    return found


@pytest.mark.parametrize("second_width", [4, 6], ids=["same-shapes", "different-shapes"])
def test_a_restart_resumes_each_call_from_its_own_checkpoints(tmp_path, second_width):
    path = tmp_path / "two.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell(c)
                for c in (
                    "%load_ext jiyu_magics",
                    DATA,
                    train_cell("first", 4, 30),
                    SAVE_FIRST,
                    train_cell("second", second_width, 60),
                )
            ]
        ),
        path,
    )
    run = jobs.submit(path, nproc=2, max_restarts=1)
    files = RunFiles.of(run.id)

    def second_call_checkpointed():
        found = calls(read_events(files.events)[0])
        return len(found) == 2 and any(e["kind"] == "ckpt" for e in found[1]) and found[1][-1].get("step", 0) >= 14

    wait_for(second_call_checkpointed, 240, every=0.1, what="the second call's first checkpoint")
    victim = next(r for r in rank_records.read_all(run.id) if r.rank == 1 and r.restart == 0)
    os.kill(victim.pid, signal.SIGKILL)

    done = finished(run.id, 300)
    assert done.status == "succeeded", done.error
    first, second, first_again, second_again = calls(read_events(files.events)[0])
    final_first = [e["path"] for e in first if e["kind"] == "ckpt"][-1]
    assert final_first.endswith("/step-00000030.pt")
    assert (first_again[0]["name"], first_again[0]["resumed_from"], first_again[0]["start_step"]) == (
        "first",
        final_first,
        30,
    )
    assert [e["kind"] for e in first_again] == ["start", "end"], "the finished call retrained"
    assert first_again[-1]["message"].startswith("Finished before the job was restarted")
    own = [e for e in second if e["kind"] == "ckpt"][-1]
    assert os.path.basename(own["path"]).startswith("fit2-step-")
    assert (second_again[0]["name"], second_again[0]["resumed_from"], second_again[0]["start_step"]) == (
        "second",
        own["path"],
        own["step"],
    )
    assert second_again[-1]["status"] == "succeeded" and second_again[-1]["step"] == 60
    before, after = (torch.load(tmp_path / f"first-{attempt}.pt", weights_only=True) for attempt in (0, 1))
    assert all(torch.equal(before[k], after[k]) for k in before), "the first call's weights changed on restart"
    assert any(r.restart == 1 for r in rank_records.read_all(run.id))
    assert_no_processes(run.id)


MANY_CALLS = """from jiyu_magics.train import fit
for call in range(30):  # each call joins and leaves the process group: 30 groups in one process
    model = torch.nn.Linear(8, 1)
    fit(model, torch.optim.SGD(model.parameters(), 0.01), DataLoader(TensorDataset(X, y), batch_size=16),
        train_step=train_step, max_steps=1, log_every=1, name=f"call{call}")"""


def test_a_job_runs_every_one_of_many_training_calls(tmp_path):
    """A job fits once per cell: every call makes and leaves its own process group, and the
    next one must not meet the previous group's store ("Connection reset by peer", or a hang)."""
    path = tmp_path / "many.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell(c)
                for c in ("%load_ext jiyu_magics", DATA.replace("time.sleep(0.05)", "pass"), MANY_CALLS)
            ]
        ),
        path,
    )
    run = jobs.submit(path, nproc=2)
    done = finished(run.id, 300)
    assert (done.status, done.exit_code) == ("succeeded", 0), done.error
    ends = [e for e in read_events(RunFiles.of(run.id).events)[0] if e["kind"] == "end"]
    assert [e["status"] for e in ends] == ["succeeded"] * 30
    assert_no_processes(run.id)


def test_a_requeued_script_resumes_each_call_from_its_own_checkpoints(monkeypatch, tmp_path):
    """A Slurm requeue relaunches the whole script with ``JIYU_RESUME=last``: the same rule as
    a torchrun restart. Here in one process, attempt by attempt, with ``fit`` itself: two calls
    of different shapes, the second cut short in the first attempt."""
    from jiyu_magics.core.store.run_store import RunStore
    from jiyu_magics.train import fit

    run = RunStore().create("job", "requeued", status="running", pid=os.getpid())
    monkeypatch.setenv("JIYU_RUN_ID", run.id)
    monkeypatch.delenv("JIYU_RESUME", raising=False)
    torch.manual_seed(0)
    inputs = torch.randn(256, 8)
    data = (inputs, inputs.sum(1, keepdim=True))

    def call(width: int, steps: int, name: str):
        model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Linear(width, 1))
        return fit(
            model,
            torch.optim.SGD(model.parameters(), 0.01),
            data,
            batch_size=16,
            loss_fn=torch.nn.MSELoss(),
            max_steps=steps,
            ckpt_every=2,
            log_every=1,
            name=name,
        ), model

    (_, first_model), (cut, _) = call(4, 10, "first"), call(6, 4, "second")  # attempt 1: the second is cut at 4
    monkeypatch.setenv("JIYU_RESUME", "last")  # attempt 2, as the batch script sets it on a requeue
    (again, again_model), (second, _) = call(4, 10, "first"), call(6, 8, "second")
    assert again.message.startswith("Finished before the job was restarted") and again.history == []
    assert all(
        torch.equal(a, b)
        for a, b in zip(first_model.state_dict().values(), again_model.state_dict().values(), strict=True)
    )
    start = [e for e in read_events(RunFiles.of(run.id).events)[0] if e["kind"] == "start"][-1]
    assert (start["name"], start["start_step"], start["resumed_from"]) == ("second", 4, cut.last_checkpoint)
    assert os.path.basename(cut.last_checkpoint) == "fit2-step-00000004.pt" and second.step == 8
