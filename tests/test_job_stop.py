"""Stop means stop, for a background job: real detached supervisors, real torchrun (gloo), real
SIGTERMs through ``jiyu stop`` and ``jobs.stop``. Once a stop is requested, the training call
under way returns ``stopped`` with its checkpoint, the job's script ends there (no later cell,
no later ``fit``), torchrun exits 0, the status stays ``stopped`` and the log ends with the one
line that says where it stopped and how to resume."""

from __future__ import annotations

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records
from jiyu_magics.train import fit
from jiyu_magics.train.checkpoint import load_checkpoint, newest_checkpoint

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, finished, wait_for

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

DATA = (
    "import time, torch\nfrom torch.utils.data import DataLoader, TensorDataset\ntorch.manual_seed(0)\n"
    "X = torch.randn(1024, 8); y = X.sum(1, keepdim=True)\n"
    "def train_step(model, batch):\n    time.sleep(0.01)\n    inputs, targets = batch\n"
    "    return torch.nn.functional.mse_loss(model(inputs), targets)"
)
TRAIN = """%%train --max-steps 100000 --ckpt-every 20 --log-every 5 --seed 0 --name quick
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), 0.01)
train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)"""
# the quickstart's next cell: it must not run once the job was stopped
CONTINUE = "%train --resume last --max-steps 200000 --ckpt-every 20 --log-every 5 --name quick"
SWEEP = """results = []
for lr in (0.01, 0.001):  # a stop during the first call: the second must not start
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr)
    results.append(fit(model, optimizer, DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True),
                       train_step=train_step, max_steps=100000, ckpt_every=20, log_every=5, name=f"lr{lr}"))
    print("call returned", results[-1].status)"""


def job_notebook(path, *cells):
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in ("%load_ext jiyu_magics", DATA, *cells)]), path)
    return path


def events_of(run_id):
    return read_events(RunFiles.of(run_id).events)[0]


def wait_for_checkpoints(run_id, count=2):
    wait_for(lambda: sum(e["kind"] == "ckpt" for e in events_of(run_id)) >= count, 180, what="checkpoints")


def test_jiyu_stop_ends_the_job_at_its_checkpoint_and_runs_no_further_cell(tmp_path):
    nb = job_notebook(tmp_path / "quick.ipynb", TRAIN, CONTINUE, "print('a later cell ran')")
    run = jobs.submit(nb, nproc=1, name="quick")
    wait_for_checkpoints(run.id)
    stop = jiyu("stop", run.id, "--grace", "30")
    assert stop.returncode == 0 and f"Run {run.id} (quick): stopped." in stop.stdout, stop.stdout + stop.stderr

    done, events, files = finished(run.id), events_of(run.id), RunFiles.of(run.id)
    (end,) = [e for e in events if e["kind"] == "end"]  # no owner's end: rank 0's stopped says it all
    assert end["status"] == "stopped" and "source" not in end
    assert [e["kind"] for e in events].count("start") == 1, "the continue cell started training again"
    assert events[-1] is end, "nothing trained, checkpointed or logged after the stop"
    checkpoint = [e["path"] for e in events if e["kind"] == "ckpt"][-1]
    line = (
        f"stopped at step {end['step']} by request; checkpoint {checkpoint}; resume with %train --resume {checkpoint}"
        " --name quick"  # the training call's name: the command names the run it continues
    )
    assert (done.status, done.exit_code, done.error) == ("stopped", 0, line)
    assert str(newest_checkpoint(files.ckpt)) == checkpoint, "--resume last must find the stop's checkpoint"
    assert load_checkpoint(checkpoint)["step"] == end["step"]
    log = files.log.read_text()
    assert log.rstrip().splitlines()[-1].endswith(f"job {line}")
    assert "Traceback" not in log and "exit code" not in log and "a later cell ran" not in log
    assert RunStore().get(run.id).status == "stopped"
    assert_no_processes(run.id)
    resumed = resume_as_printed(checkpoint, end["step"] + 3)
    assert resumed.status == "succeeded" and resumed.history[0]["step"] > end["step"]


def resume_as_printed(checkpoint: str, steps: int):
    """The line's command, as ``fit``: the same model continues from the stop's checkpoint."""
    torch.manual_seed(0)
    inputs = torch.randn(64, 8)
    model = torch.nn.Linear(8, 1)
    return fit(
        model,
        torch.optim.SGD(model.parameters(), 0.01),
        (inputs, inputs.sum(1, keepdim=True)),
        batch_size=16,
        loss_fn=torch.nn.MSELoss(),
        resume=checkpoint,
        max_steps=steps,
        log_every=1,
    )


def test_a_stopped_ddp_job_starts_no_further_fit_and_every_rank_exits_cleanly(tmp_path):
    """Two ranks, a sweep of ``fit`` calls in one cell: the stop reaches both ranks during the
    first call; each returns ``stopped``, the second call refuses to start, both ranks exit 0."""
    nb = job_notebook(tmp_path / "sweep.ipynb", "from jiyu_magics.train import fit", SWEEP, "print('a later cell ran')")
    run = jobs.submit(nb, nproc=2, name="sweep")
    wait_for_checkpoints(run.id)
    stopped = jobs.stop(run.id, grace=30)
    assert stopped.status == "stopped" and stopped.exit_code == 0, stopped.error
    events = events_of(run.id)
    assert [(e["kind"], e.get("name")) for e in events if e["kind"] in ("start", "end")] == [
        ("start", "lr0.01"),
        ("end", None),
    ]
    assert stopped.error.startswith(f"stopped at step {events[-1]['step']} by request; checkpoint ")
    ranks = rank_records.read_all(run.id)
    assert [(r.rank, r.state, r.exit_code, r.stopped) for r in ranks] == [
        (0, "exited", 0, True),
        (1, "exited", 0, True),
    ]
    log = RunFiles.of(run.id).log.read_text()
    assert "[rank0]: call returned stopped" in log and "[rank1]: call returned stopped" in log
    assert "[rank0]: [jiyu] training not started: the job was asked to stop" in log
    assert "a later cell ran" not in log and "Traceback" not in log
    assert_no_processes(run.id)
