"""A job's stacks and tracebacks name the notebook's cells, not the exported script (issue 25,
item 6): the exporter's line map (``job.map.json``), a real 2-rank gloo job exported from a
notebook whose rank 1 stalls in (then fails in) a function of its second cell, followed by its
lifecycle owner in this process; and the stall, once the step moves again, told with how long
it lasted in the event log and the run's log."""

from __future__ import annotations

import json
import re

import pytest

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.line_map import LineMap, map_traceback
from jiyu_magics.core.runs.model import RunKind, RunStatus
from jiyu_magics.jobs import export_notebook
from jiyu_magics.jobs.launch_spec import LaunchSpec
from jiyu_magics.jobs.lifecycle import RunLifecycle

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, wait_for
from .notebook_runner import notebook

SETUP = """import os, time
import torch
from jiyu_magics.train.engine import fit

RANK = int(os.environ["RANK"])
x, y = torch.randn(2048, 8), torch.randn(2048, 1)
model = torch.nn.Linear(8, 1)
calls = 0"""
STEP = """def train_step(model, batch):
    global calls
    calls += 1
    if RANK == 1 and calls == 12:
        {misbehave}
    inputs, targets = batch
    return torch.nn.functional.mse_loss(model(inputs), targets)"""
FIT = """fit(model, torch.optim.SGD(model.parameters(), lr=0.01), (x, y), batch_size=8, epochs=1,
    train_step=train_step, log_every=1, stall_timeout=3, save_ckpts=False)"""


def write_job(folder, misbehave: str):
    nb = notebook("steps = 1", SETUP, STEP.format(misbehave=misbehave), FIT, tags={0: ["parameters"]})
    path = folder / "stalls.ipynb"
    path.write_text(json.dumps(nb))
    return export_notebook(path)


def test_every_line_of_the_exported_script_maps_back_to_its_cell(tmp_path):
    export = write_job(tmp_path, "raise ValueError('bad batch')")
    script = tmp_path / "job.py"
    export.write(script)
    line_map = LineMap.read(tmp_path / "job.map.json")
    assert line_map is not None and line_map.parameters == ["steps"]
    lines = script.read_text().splitlines()
    raise_at = next(i for i, line in enumerate(lines, 1) if "raise ValueError" in line)
    where = line_map.where(str(script), raise_at)
    assert where is not None and (where.label, where.line, where.text) == ("cell 3", 5, "raise ValueError('bad batch')")
    assert line_map.where(str(script), 3) is None, "the script's own header is no cell's"
    mapped = map_traceback([f'  File "{script}", line {raise_at}, in train_step'], line_map)
    assert mapped == ["  cell 3, line 5, in train_step"]


@pytest.fixture
def job(torchrun_tmp, monkeypatch):
    made = []

    def start(misbehave: str) -> RunLifecycle:
        lifecycle = RunLifecycle.register(RunKind.JOB, "mapped", LaunchSpec(nproc=2), owner="test")
        write_job(torchrun_tmp, misbehave).write(lifecycle.files.script)
        lifecycle.stop_grace = 2.0
        assert lifecycle.start()
        made.append(lifecycle)
        return lifecycle

    monkeypatch.chdir(torchrun_tmp)
    yield start
    for lifecycle in made:
        lifecycle.kill()
        lifecycle.end()


def test_a_stall_in_a_cell_is_named_by_cell_and_line_and_its_end_is_told(job):
    lifecycle = job("time.sleep(9)  # rank 1 stands still, then goes on")
    stall = wait_for(
        lambda: (lifecycle.running() or True) and _stalls(lifecycle), 120, every=0.25, what="the stall event"
    )[0]
    shown = jiyu("stacks", lifecycle.run_id)
    assert shown.returncode == 0, shown.stderr
    assert "  rank 1 is in train_step (cell 3, line 5)" in shown.stdout, shown.stdout
    assert "    cell 3, line 5, in train_step\n        time.sleep(9)" in shown.stdout
    assert "frames of jiyu, IPython, runpy and torchrun folded" in shown.stdout
    assert "<frozen runpy>" not in shown.stdout and "rank_worker.py" not in shown.stdout, "folded, not listed"
    stacks = json.loads(jiyu("stacks", lifecycle.run_id, "--json").stdout)
    rank1 = next(g for g in stacks["groups"] if g["ranks"] == [1])
    user = [f for f in rank1["frames"] if f["kind"] == "user"]
    assert user[0]["cell"] == "cell 3, line 5" and user[0]["source"].startswith("time.sleep(9)")
    cleared = wait_for(
        lambda: (lifecycle.running() or True) and [s for s in _stalls(lifecycle) if s.get("cleared")],
        60,
        what="the clear",
    )[0]
    assert cleared["since"] == stall["since"] and 3.0 <= cleared["lasted"] < 15.0, cleared
    lifecycle.wait()
    assert lifecycle.end().status == RunStatus.SUCCEEDED
    log = lifecycle.files.log.read_text()
    assert re.search(r"\[jiyu\] \S+ stalled: no step since step \d+ for \d+ s", log), log[-2000:]
    assert re.search(r"\[jiyu\] \S+ the stall at step \d+ cleared after \d+ s", log), log[-2000:]
    assert_no_processes(lifecycle.run_id)


def test_a_failing_ranks_traceback_names_the_cell(job):
    lifecycle = job("raise ValueError('bad batch on rank 1')")
    lifecycle.wait()
    outcome = lifecycle.end()
    assert outcome.status == RunStatus.FAILED
    log = lifecycle.files.log.read_text()
    assert "[rank1]:   cell 3, line 5, in train_step" in log, log[-3000:]
    assert "[rank1]:     raise ValueError('bad batch on rank 1')" in log
    assert 'job.py", line' not in log.split("Traceback")[-1], "no frame of the script left unmapped"
    assert_no_processes(lifecycle.run_id)


def _stalls(lifecycle: RunLifecycle) -> list[dict]:
    return [e for e in read_events(lifecycle.files.events)[0] if e["kind"] == "stall"]
