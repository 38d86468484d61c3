"""Elastic restart of a real ``%%train`` notebook job: kill -9 one rank mid-run with
``--max-restarts 1``; torchrun restarts the workers, the engine resumes from the run's last
checkpoint on its own, and the job succeeds having redone at most one checkpoint interval."""

from __future__ import annotations

import os
import signal

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.jobs.process import rank_records as ranks

from .jobs_workload import assert_no_processes, finished, wait_for, write_train_notebook

CKPT_EVERY = 4


def test_killed_rank_restarts_and_the_engine_resumes_from_the_last_checkpoint(tmp_path, torchrun_tmp):
    run = jobs.submit(write_train_notebook(tmp_path / "elastic.ipynb"), nproc=2, max_restarts=1)
    files = RunFiles.of(run.id)

    def progress():
        events = read_events(files.events)[0]
        return [e for e in events if e["kind"] == "ckpt"] and max(
            (e["step"] for e in events if e["kind"] == "step"), default=0
        ) >= CKPT_EVERY + 2

    wait_for(progress, 180, what="a checkpoint and two more steps")
    victim = next(r for r in ranks.read_all(run.id) if r.rank == 1 and r.restart == 0)
    killed_at = max(e["step"] for e in read_events(files.events)[0] if e["kind"] == "step")
    os.kill(victim.pid, signal.SIGKILL)

    done = finished(run.id, 300)
    assert done.status == "succeeded", done.error
    events = read_events(files.events)[0]
    starts = [e for e in events if e["kind"] == "start"]
    assert len(starts) == 2, "torchrun restarted the workers once"
    resumed = starts[1]
    checkpoints = [e["step"] for e in events if e["kind"] == "ckpt" and e["t"] < resumed["t"]]
    assert resumed["resumed_from"] and resumed["start_step"] == max(checkpoints)
    assert (
        0 <= killed_at - resumed["start_step"] <= CKPT_EVERY + 1
    )  # redone: at most one interval (+ the step in flight)
    ends = [e for e in events if e["kind"] == "end"]
    assert ends[-1]["status"] == "succeeded" and max(e["step"] for e in events if e["kind"] == "step") == 30
    assert any(r.restart == 1 for r in ranks.read_all(run.id))
    assert_no_processes(run.id)
