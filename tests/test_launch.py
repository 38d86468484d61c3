"""The torchrun launcher building block (``%%train --nproc`` and job supervisors use it), on
real 2-rank gloo runs: per-rank status, the first failing rank's error, and a verified stop."""

from __future__ import annotations

import json
import time

import pytest

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
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


CAUGHT_THEN_FAILS = """
import os
import torch
from torch import nn
from jiyu_magics.train import fit

rank = int(os.environ["RANK"])


def train_step(model, batch):
    raise ValueError("fit's error, which the script catches")


model = nn.Linear(4, 1)
try:
    fit(model, torch.optim.SGD(model.parameters(), 0.1), [(torch.randn(2, 4),)] * 4, train_step=train_step)
except ValueError:
    print(f"rank {rank} goes on")
if rank == 1 and os.environ.get("THEN_FAILS"):
    raise RuntimeError("the script's own error, after fit")
"""


@pytest.mark.parametrize("then_fails", [True, False], ids=["then-fails", "then-ends"])
def test_a_fit_error_the_script_caught_gives_way_to_how_the_rank_ends(tmp_path, monkeypatch, then_fails):
    """``fit`` writes torchrun's error file the moment a rank fails. Each rank's script catches
    that error: a later error of the script's own is then the rank's cause, in the files
    torchrun reads as in the run's row, and a rank that ends well leaves no error file."""
    script = tmp_path / "caught.py"
    script.write_text(CAUGHT_THEN_FAILS)
    if then_fails:
        monkeypatch.setenv("THEN_FAILS", "1")
    run = RunStore().create("ddp", "caught", status="running")
    launch = Launch.start(script, nproc=2, run_id=run.id, cwd=tmp_path)
    assert (launch.wait(180) != 0) is then_fails
    files = RunFiles.of(run.id)
    assert "rank 0 goes on" in files.log.read_text() and "rank 1 goes on" in files.log.read_text()
    rank_files = sorted(files.root.glob("torchrun/*/attempt_0/*/error.json"))
    if then_fails:
        ending = "RuntimeError: the script's own error, after fit"
        assert launch.error_line() == f"rank 1: {ending}"
        assert [f.parent.name for f in rank_files] == ["1"]
        for error_file in (rank_files[0], files.error):  # rank 1's own, and the root cause torchrun chose
            assert json.loads(error_file.read_text())["message"]["message"] == ending
    else:
        assert launch.error_line() is None and rank_files == []
    assert processes_of(run.id) == []


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


BEFORE_THE_GROUP = """import os, time, torch.distributed as dist
if os.environ["RANK"] == "1":
    time.sleep(5)  # rank 0 is inside init_process_group by then, even on a loaded machine
    raise ValueError("rank 1 broke before joining")
dist.init_process_group("gloo")
"""


def test_a_rank_stuck_waiting_for_a_peer_that_failed_ends_itself_and_the_peer_stays_the_cause(tmp_path):
    """Rank 1 fails before joining the group: rank 0 waits inside ``init_process_group`` (C++,
    its SIGTERM handler cannot run) and before the peer watch torchrun SIGKILLed it only after
    its 30 s grace; now it ends itself ``STUCK_S`` after the peer's error, well before that."""
    from jiyu_magics.jobs.process.peer_failure import STUCK_S

    (tmp_path / "job.py").write_text(BEFORE_THE_GROUP)
    run = RunStore().create("ddp", "stuck-peer", status="running")
    launch = Launch.start(tmp_path / "job.py", nproc=2, run_id=run.id, cwd=tmp_path)
    assert launch.wait(180) != 0
    assert launch.error_line() == "rank 1: ValueError: rank 1 broke before joining"
    stuck, failed = launch.ranks()
    assert (stuck.state, stuck.exit_code) == ("exited", 1) and "after rank 1 failed: it was stuck" in stuck.error
    assert STUCK_S <= stuck.ended - failed.ended < 25, "ended by its own watch, not by torchrun's SIGKILL at 30 s"
    assert f"[jiyu] rank 0 ended {STUCK_S:.0f} s after rank 1 failed" in RunFiles.of(run.id).log.read_text()
    assert processes_of(run.id) == []


TAKES_THE_STOP = """import os, signal, sys, time
from jiyu_magics.core.processes import job_stop
if os.environ["RANK"] == "1":
    time.sleep(1)
    raise ValueError("rank 1 broke")
stopping = []
signal.signal(signal.SIGTERM, lambda *_: (job_stop.note("test"), stopping.append(time.time())))
while not stopping:
    time.sleep(0.05)
while time.time() - stopping[0] < {busy}:  # a long stop checkpoint, in Python: the stop is taken
    time.sleep(0.05)
open({marker!r}, "w").write("finished its stop")
"""


def test_a_rank_busy_with_its_stop_after_a_peer_failed_is_not_cut_short(tmp_path):
    """The watch ends only a rank that has not taken the stop: one writing its stop
    checkpoint (here: as ``fit`` does, its handler noted the stop) runs on past ``STUCK_S``."""
    from jiyu_magics.jobs.process.peer_failure import STUCK_S

    marker = tmp_path / "marker.txt"
    (tmp_path / "job.py").write_text(TAKES_THE_STOP.format(busy=STUCK_S + 4, marker=str(marker)))
    run = RunStore().create("ddp", "busy-peer", status="running")
    launch = Launch.start(tmp_path / "job.py", nproc=2, run_id=run.id, cwd=tmp_path)
    assert launch.wait(180) != 0
    assert marker.read_text() == "finished its stop"
    busy, failed = launch.ranks()
    assert (busy.exit_code, busy.error) == (0, None) and failed.error == "ValueError: rank 1 broke"
    assert launch.error_line() == "rank 1: ValueError: rank 1 broke"
