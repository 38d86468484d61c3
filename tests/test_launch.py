"""The torchrun launcher building block (``%%train --nproc`` and job supervisors use it), on
real 2-rank gloo runs: per-rank status, the first failing rank's error, and a verified stop."""

from __future__ import annotations

import time

import pytest

from jiyu_magics.core.run_files import RunFiles
from jiyu_magics.core.run_store import RunStore
from jiyu_magics.jobs import Launch

from .jobs_workload import processes_of, steps_logged, wait_for, write_script


pytestmark = pytest.mark.usefixtures("torchrun_tmp")


def start(tmp_path, **workload) -> Launch:
    run = RunStore().create("ddp", "launch-test", status="running")
    return Launch.start(write_script(tmp_path / "workload.py", **workload), nproc=2, run_id=run.id, cwd=tmp_path)


def test_two_ranks_run_with_per_rank_status_and_prefixed_logs(tmp_path):
    launch = start(tmp_path, steps=8)
    wait_for(lambda: launch.poll() is not None or len(launch.ranks()) == 2, what="both ranks to report")
    assert launch.wait(180) == 0
    assert [(r.rank, r.state, r.exit_code) for r in launch.ranks()] == [(0, "exited", 0), (1, "exited", 0)]
    assert launch.first_failure() is None and launch.error_line() is None
    log = RunFiles.of(launch.run_id).log.read_text()
    assert "[rank0]: rank 0 done" in log and "[rank1]: rank 1 done" in log
    losses = [e["loss"] for e in steps_logged(launch.run_id)]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert processes_of(launch.run_id) == []


def test_a_rank_that_raises_is_the_error_the_user_sees(tmp_path):
    launch = start(tmp_path, steps=50, fail_rank=1, fail_step=3)
    assert launch.wait(180) != 0
    assert launch.error_line() == "rank 1: RuntimeError: rank 1 gave up at step 3"
    failure = launch.first_failure()
    assert failure.rank == 1 and failure.exit_code == 1
    assert processes_of(launch.run_id) == []


def test_stop_ends_every_rank_within_ten_seconds(tmp_path):
    launch = start(tmp_path, steps=10_000, step_seconds=0.05)
    wait_for(lambda: steps_logged(launch.run_id), what="the first training step")
    pids = {r.pid for r in launch.ranks()}
    began = time.monotonic()
    result = launch.stop(grace=10)
    assert time.monotonic() - began < 10
    assert result.clean and result.found >= 3  # torchrun and both ranks
    assert launch.poll() == 0 and result.killed == [], "the ranks ended their script, then torchrun, unforced"
    assert processes_of(launch.run_id) == []
    assert {(r.state, r.stopped) for r in launch.ranks()} == {("exited", True)}
    assert {r.pid for r in launch.ranks()} == pids
