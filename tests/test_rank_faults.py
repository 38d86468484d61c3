"""No orphaned rank, and the right rank named, on real faults: ``kill -9`` (os.kill with
SIGKILL, as the OOM killer does it) of a rank, of the torchrun agent, of the agent together
with its supervisor, and of a notebook kernel's whole process group during ``%%train --nproc``;
real torchrun (gloo, 2 ranks), real supervisors and kernels, the real process table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from jupyter_client import KernelManager

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records, torchrun_report

from .cli_runner import jiyu
from .jobs_workload import (
    assert_no_processes,
    finished,
    processes_of,
    steps_logged,
    wait_for,
    write_notebook,
    write_train_notebook,
)

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

ORPHAN_DEADLINE_S = 90.0  # parent-death SIGKILL of torchrun, SIGTERM of the ranks, a checkpoint; at worst the
# ranks' own 30 s orphan grace for one stuck in a collective (or torchrun's 30 s grace before it SIGKILLs a rank,
# where torchrun lives), with room for a loaded machine


def torchrun_of(run_id: str) -> psutil.Process:
    supervisor = psutil.Process(RunStore().get(run_id).pid)
    return next(p for p in supervisor.children() if "torch.distributed.run" in p.cmdline())


def events_of(run_id: str) -> list[dict]:
    return read_events(RunFiles.of(run_id).events)[0]


def listed_as_lost(run_id: str):
    """The run as listings show it once nothing of it is left (lost, derived by the read), then
    as the store records it at the next upkeep of a run owner (the Jupyter server's every 10 s,
    the next submit), which also ends its event log."""
    wait_for(
        lambda: (lambda r: r if r.status == "lost" else None)(
            {r.id: r for r in jobs.list_runs(include_finished=True)}[run_id]
        ),
        60,
        what=f"run {run_id} lost",
    )
    store = RunStore()
    assert store.stored(run_id).status == "running", "a listing writes nothing"
    assert store.record_lost(every=0) == [run_id]
    return store.stored(run_id)


def test_a_rank_killed_by_sigkill_is_the_failure_named(tmp_path):
    run = jobs.submit(write_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"steps": 10_000})
    wait_for(lambda: len(steps_logged(run.id)) >= 3, what="three steps")
    os.kill(next(r for r in rank_records.read_all(run.id) if r.rank == 1).pid, signal.SIGKILL)
    done = finished(run.id)
    assert (done.status, done.error) == ("failed", "rank 1: killed by SIGKILL (out of memory?)")
    error, end = events_of(run.id)[-2:]
    assert (error["kind"], error["message"], end["kind"], end["status"]) == ("error", done.error, "end", "failed")
    assert done.error in RunFiles.of(run.id).log.read_text().splitlines()[-1]
    assert_no_processes(run.id)


def test_kill_9_of_torchrun_ends_its_ranks_and_jiyu_stop_still_sweeps_the_run(tmp_path):
    run = jobs.submit(
        write_train_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"steps": 100_000, "step_seconds": 0.02}
    )
    wait_for(lambda: any(e["kind"] == "ckpt" for e in events_of(run.id)), 180, what="a checkpoint")
    os.kill(torchrun_of(run.id).pid, signal.SIGKILL)
    done = finished(run.id)
    assert (done.status, done.exit_code) == ("failed", -9)
    assert done.error == "torchrun killed by SIGKILL; its ranks were stopped with it"
    assert [pid for pid in processes_of(run.id) if pid != done.pid] == [], (
        "the owner recorded the end with ranks still running (the owner itself may still be exiting)"
    )
    assert all(r.stopped for r in rank_records.read_all(run.id)), "the ranks did not stop at a step"
    leftover = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"],
        env={**os.environ, "JIYU_RUN_ID": run.id},
        start_new_session=True,
    )
    wait_for(lambda: leftover.pid in processes_of(run.id), 10, every=0.05, what="the leftover to start")
    stop = jiyu("stop", run.id, "--grace", "1")
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.strip() == (
        f"Run {run.id} (nb): failed. It had already ended, but 1 process still carrying "
        f"its id was running: stopped ({leftover.pid})."
    )
    assert leftover.wait(10) == -signal.SIGKILL and processes_of(run.id) == []
    assert RunStore().get(run.id).status == "failed", "the ended run keeps its status"


def test_ranks_die_with_their_agent_when_nobody_is_left_to_stop_them(tmp_path):
    """``kill -9`` of torchrun and then of its supervisor: no owner is left to sweep, the ranks
    must notice their agent's death themselves. Once nothing of the run is left it is ``lost``,
    dated by its last event, and its log ends saying so."""
    run = jobs.submit(
        write_train_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"steps": 100_000, "step_seconds": 0.02}
    )
    wait_for(lambda: any(e["kind"] == "ckpt" for e in events_of(run.id)), 180, what="a checkpoint")
    supervisor, torchrun = RunStore().get(run.id).pid, torchrun_of(run.id).pid
    os.kill(torchrun, signal.SIGKILL)
    os.kill(supervisor, signal.SIGKILL)
    assert_no_processes(run.id, within=ORPHAN_DEADLINE_S)
    time.sleep(2.0)  # a listing comes later: the run's end is its last event, not the listing
    listed = time.time()
    lost = listed_as_lost(run.id)
    *rest, end = events_of(run.id)
    assert (end["kind"], end["status"], end["source"]) == ("end", "lost", "store")
    assert rest[-1]["kind"] == "end" and rest[-1]["status"] == "stopped", "the ranks stopped at a step"
    assert lost.ended == pytest.approx(rest[-1]["t"], abs=0.01) and lost.ended < listed - 1.5


@pytest.mark.parametrize("victim", ["kernel", "group"])
def test_kill_9_of_a_kernel_during_train_nproc_leaves_no_rank_and_the_run_lost(tmp_path, victim):
    """The kernel alone (as the OOM killer picks it), or its whole process group: torchrun (a
    session of its own) and the ranks must notice, end, and the run becomes ``lost`` with
    nothing left. Until then the kernel, its owner, kept it ``running`` past any listing. The
    kernel has many threads, each of which signals torchrun as it dies: torchrun once hung at
    exit after a second SIGTERM (1 in 4 under load), so it gets SIGKILL instead."""
    kernel = KernelManager(kernel_name="python3")
    kernel.start_kernel(cwd=str(tmp_path))
    client = kernel.client()
    client.start_channels()
    try:
        client.wait_for_ready(60)
        client.execute(
            "%load_ext jiyu_magics\nimport time, torch\nfrom torch.utils.data import DataLoader, "
            "TensorDataset\nX = torch.randn(1024, 8); y = X.sum(1, keepdim=True)"
        )
        client.execute(
            "%%train --nproc 2 --max-steps 100000 --ckpt-every 20 --log-every 2 --name orphan\n"
            "model = torch.nn.Linear(8, 1)\noptimizer = torch.optim.SGD(model.parameters(), 0.01)\n"
            "train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)\n"
            "def train_step(model, batch):\n    time.sleep(0.02)\n"
            "    return torch.nn.functional.mse_loss(model(batch[0]), batch[1])\n"
        )
        run_id = wait_for(
            lambda: next((r.id for r in RunStore().list() if r.name == "orphan"), None), 120, what="the run"
        )
        wait_for(lambda: any(e["kind"] == "ckpt" for e in events_of(run_id)), 180, what="a checkpoint")
        assert processes_of(run_id), "torchrun and its ranks run"
        kernel_pid = kernel.provisioner.process.pid
        listed = {r.id: r for r in jobs.list_runs(include_finished=True)}[run_id]
        assert (listed.status, listed.owner_pid) == ("running", kernel_pid) and listed.pid != kernel_pid
        if victim == "kernel":
            os.kill(kernel_pid, signal.SIGKILL)
        else:
            os.killpg(os.getpgid(kernel_pid), signal.SIGKILL)
        assert_no_processes(run_id, within=ORPHAN_DEADLINE_S)
    finally:
        client.stop_channels()
        kernel.cleanup_resources()
    lost = listed_as_lost(run_id)
    events = events_of(run_id)
    assert events[-1]["status"] == "lost" and lost.ended == pytest.approx(events[-2]["t"], abs=0.01)


# torchrun 2.13's own words (captured from a real run, pids replaced): its agent's line and its table
TORCHRUN_LOG = """\
W1130 22:39:35.315000 3342 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process {p0} closing signal SIGTERM
E1130 22:39:35.515000 3342 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 \
(pid: {p1}) of binary: /usr/bin/python
[rank0]:   exitcode  : 7 (pid: 1)   <- a rank's own output is not torchrun's report
Failures:
[1]:
  time      : 2026-11-30_22:39:35
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : {code0} (pid: {p0})  ({name0})
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID {p0}
"""


@pytest.mark.parametrize(
    "code0, name0, first",
    [
        (-15, "SIGTERM", "rank 1: killed by SIGKILL (out of memory?)"),  # rank 0 was closed by torchrun
        (1, "N/A", "rank 1: killed by SIGKILL (out of memory?)"),  # rank 0 failed because rank 1 vanished
    ],
)
def test_the_rank_torchrun_saw_killed_by_a_signal_is_the_first_failure(tmp_path, code0, name0, first):
    """The rule on its own, from torchrun's report: the rank killed by a signal is the cause,
    even when another rank recorded an error earlier; a rank killed by SIGTERM is a victim."""
    gone = [subprocess.Popen([sys.executable, "-c", "pass"]) for _ in range(2)]
    for proc in gone:
        proc.wait()
    p0, p1 = (proc.pid for proc in gone)
    log = tmp_path / "stdout.log"
    log.write_text(TORCHRUN_LOG.format(p0=p0, p1=p1, code0=code0, name0=name0))
    assert torchrun_report.exit_codes(log) == {p0: code0, p1: -9}
    now = time.time()
    records = [
        rank_records.RankRecord(
            0,
            0,
            p0,
            started=now - 5,
            ended=now - 2,
            exit_code=1,
            error="RuntimeError: [gloo] Connection closed by peer",
        )
        if code0 == 1
        else rank_records.RankRecord(0, 0, p0, started=now - 5),
        rank_records.RankRecord(1, 1, p1, started=now - 5),
    ]
    records = rank_records.with_signals(records, torchrun_report.signals(log))
    assert rank_records.first_failure(records).describe() == first


ORPHAN = "import subprocess, sys\nsubprocess.Popen(sys.argv[1:], start_new_session=True)\n"  # starts it, exits at once


def test_a_rank_whose_agent_died_before_it_started_runs_nothing(tmp_path):
    """The parent-death signal only covers a parent that dies after it was asked for: a rank
    whose agent is already gone (here: the process that starts it exits at once) must notice
    by itself and run nothing."""
    probe = tmp_path / "probe.txt"
    subprocess.run(
        [
            sys.executable,
            "-c",
            ORPHAN,
            sys.executable,
            "-c",
            f"import os, time; time.sleep(0.5); open({str(probe)!r}, 'w').write(str(os.getppid()))",
        ],
        check=True,
    )
    adopter = int(wait_for(lambda: probe.exists() and probe.read_text(), 10, what="the probe"))
    if adopter != 1:
        pytest.skip(f"orphans here are adopted by a subreaper (pid {adopter}), not init: the rank cannot tell")
    script, ran = tmp_path / "script.py", tmp_path / "ran.txt"
    script.write_text(f"open({str(ran)!r}, 'w').write('the script ran')\n")
    out = tmp_path / "rank.out"
    with open(out, "w") as log:
        subprocess.run(
            [sys.executable, "-c", ORPHAN, sys.executable, "-m", "jiyu_magics.jobs.process.rank_worker", str(script)],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
        )
    wait_for(lambda: "[jiyu] stopped by a stop request (SIGTERM)" in out.read_text(), 30, what="the rank to stop")
    assert not ran.exists()


def test_a_rank_the_agent_killed_itself_is_not_the_cause(tmp_path):
    """Once rank 1 failed, torchrun ends rank 0: SIGTERM, and SIGKILL after 30 s when rank 0 is
    stuck in a collective. That SIGKILL is the agent's, so rank 1's error is the one named."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    log = tmp_path / "stdout.log"
    log.write_text(
        f"W1130 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process {gone.pid} closing "
        "signal SIGTERM\nW1130 torch/distributed/elastic/multiprocessing/api.py:1047] Unable to shutdown "
        f"process {gone.pid} via 15, forcefully exiting via 9\n  rank      : 0 (local_rank: 0)\n"
        f"  exitcode  : -9 (pid: {gone.pid})  (SIGKILL)\n"
    )
    now = time.time()
    records = rank_records.with_signals(
        [
            rank_records.RankRecord(0, 0, gone.pid, started=now - 5),
            rank_records.RankRecord(
                1,
                1,
                os.getpid(),
                started=now - 5,
                ended=now - 40,
                exit_code=1,
                error="RuntimeError: [gloo] Connection reset by peer",
            ),
        ],
        torchrun_report.signals(log),
    )
    assert torchrun_report.exit_codes(log) == {gone.pid: -9} and torchrun_report.signals(log) == {}
    assert rank_records.first_failure(records).describe() == "rank 1: RuntimeError: [gloo] Connection reset by peer"


def test_a_time_limit_signal_before_training_ends_the_rank_cleanly_for_the_requeue(tmp_path, monkeypatch):
    """Slurm's time-limit signal (SIGUSR1, passed on by torchrun) can come while a slow rank is
    still starting, before its fit handles it (seen on a loaded machine with a 1-minute limit):
    the rank ends with status 0, its record and a line saying why, instead of dying of the
    signal's default action, which torchrun reported as a failed worker and left the rank's
    record without its end."""
    run = RunStore().create("job", "time-limit")
    monkeypatch.setenv("JIYU_RUN_ID", run.id)
    script, started = tmp_path / "slow_start.py", tmp_path / "started"
    script.write_text(f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(60)\n")
    rank = subprocess.Popen(
        [sys.executable, "-m", "jiyu_magics.jobs.process.rank_worker", str(script)],
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(started.exists, 30, what="the script to start")
    rank.send_signal(signal.SIGUSR1)
    _, err = rank.communicate(timeout=30)
    assert rank.returncode == 0, err
    assert "rank 0: the scheduler's time limit (SIGUSR1) came outside training: ending for the requeue" in err
    (record,) = rank_records.read_all(run.id)
    assert (record.exit_code, record.error) == (0, None)
