"""Background jobs through ``jobs.submit`` / ``jobs.stop`` and the ``jiyu`` CLI, on real
detached supervisors, real torchrun (gloo, 2 ranks), real SQLite and the real process table."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events, summarize
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records as ranks

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, finished, processes_of, steps_logged, wait_for, write_notebook
from .ports import free_port
from .server_fixtures import coloured_traceback, ended_run

pytestmark = pytest.mark.usefixtures("torchrun_tmp")


def test_a_submitted_notebook_runs_detached_to_success(tmp_path):
    nb = write_notebook(tmp_path / "train.ipynb")
    marker = tmp_path / "notified.txt"
    run = jobs.submit(nb, nproc=2, params={"steps": 10}, notify=f"sh -c 'echo \"$0 $1\" > {marker}'")
    assert run.status == "queued" and run.kind == "job" and run.pid  # the supervisor's pid, at once
    # one rule for owners: the supervisor records the end, so it is the owner as well
    assert (run.owner_pid, run.owner_started) == (run.pid, run.pid_started)
    assert (run.name, run.nproc, run.cwd, run.params) == ("train", 2, str(tmp_path), {"steps": 10})
    # running from the moment its lease is taken; torchrun's group is recorded once it has started
    running = wait_for(
        lambda: (lambda r: r if r.status == "running" and r.pgid else None)(RunStore().get(run.id)),
        what="running, with torchrun's process group",
    )
    assert running.pgid and running.pgid != running.pid and running.started  # torchrun's own group
    assert running.pid == running.owner_pid == run.pid, "the supervisor is recorded, not torchrun"
    done = finished(run.id)
    assert (done.status, done.exit_code, done.error) == ("succeeded", 0, None) and done.ended >= done.started
    files = RunFiles.of(run.id)
    assert "!nvidia-smi" in files.script.read_text() and json.loads(files.params.read_text()) == {"steps": 10}
    log = files.log.read_text()
    assert "[rank0]: rank 0 done" in log and "[rank1]: rank 1 done" in log and "job succeeded" in log
    summary = summarize(files.events)
    assert summary["step"] == 10 and summary["loss"] is not None and summary["end_status"] == "succeeded"
    assert wait_for(lambda: marker.exists() and marker.read_text().strip(), 30) == f"{run.id} succeeded"
    assert_no_processes(run.id)


def test_a_failing_rank_fails_the_job_with_that_ranks_error(tmp_path):
    run = jobs.submit(write_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"fail_rank": 1, "steps": 50})
    done = finished(run.id)
    assert done.status == "failed" and done.exit_code not in (0, None)
    assert done.error == "rank 1: RuntimeError: rank 1 gave up at step 3"
    errors = [e for e in read_events(RunFiles.of(run.id).events)[0] if e["kind"] == "error"]
    assert errors and errors[-1]["message"] == done.error
    assert_no_processes(run.id)


def test_stop_leaves_no_process_and_keeps_the_checkpoint(tmp_path):
    run = jobs.submit(
        write_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"steps": 10_000, "step_seconds": 0.05, "ckpt_every": 2}
    )
    wait_for(lambda: len(steps_logged(run.id)) >= 3, what="three steps")
    stopped = jobs.stop(run.id[:5], grace=10)
    # Each rank wrote its own end as stopped: it took the SIGTERM, none waited for the SIGKILL
    # at the grace's end (a killed rank cannot write). A clock would say the same, flakily.
    ended = [(r.rank, r.stopped, r.ended is not None) for r in ranks.read_all(run.id)]
    assert ended == [(0, True, True), (1, True, True)]
    assert stopped.status == "stopped" and RunStore().get(run.id).status == "stopped"
    assert_no_processes(run.id)
    assert (RunFiles.of(run.id).ckpt / "last.pt").exists()
    assert jobs.stop(run.id).status == "stopped"  # stopping an ended run changes nothing
    assert RunStore().get(run.id).stop_grace == 10  # the supervisor was told the grace asked for


def test_stop_refuses_a_run_training_inside_a_kernel(tmp_path):
    """Its pid is the notebook kernel: stopping "the run" must not kill the user's kernel."""
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run = RunStore().create("kernel", "in-kernel", status="running")
        RunStore().mark_running(run.id, pid=kernel.pid)
        with pytest.raises(jobs.JobError, match="trains inside a notebook kernel: interrupt that kernel"):
            jobs.stop(run.id)
        result = jiyu("stop", run.id)
        assert result.returncode == 2 and "interrupt that kernel" in result.stderr
        assert kernel.poll() is None and RunStore().get(run.id).status == "running"
    finally:
        kernel.kill()
        kernel.wait()


def test_a_stop_as_torchrun_exits_waits_for_the_kernel_that_owns_the_run_and_never_signals_it(tmp_path):
    """``jiyu stop`` in the moment a ``%%train --nproc`` run's torchrun (its recorded pid) has
    exited after the last step and its kernel (the owner; here a process standing in for it)
    has not yet recorded the end: the stop waits for the kernel's word, succeeded, rather than
    recording a stop of its own that would stand as the first final status."""
    from jiyu_magics.core.processes.info import process_start_time
    from jiyu_magics.jobs.final_status import Outcome, RunStatus
    from jiyu_magics.jobs.lifecycle import record_end

    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    torchrun = subprocess.Popen([sys.executable, "-c", "pass"])
    torchrun.wait()
    try:
        run = RunStore().create(
            "ddp",
            "just-finished",
            status="running",
            pid=torchrun.pid,
            owner_pid=kernel.pid,
            owner_started=process_start_time(kernel.pid),
        )
        recorder = threading.Timer(1.0, lambda: record_end(RunStore(), run.id, Outcome(RunStatus.SUCCEEDED, 0, None)))
        recorder.start()
        stopped = jobs.stop(run.id, grace=1)
        recorder.join()
        assert (stopped.status, stopped.exit_code) == ("succeeded", 0), "the kernel's end, not the stop's"
        assert kernel.poll() is None, "the kernel was signalled"
    finally:
        kernel.kill()
        kernel.wait()


def test_a_stop_reaches_rank_0_of_the_users_own_torchrun_that_registered_the_run(tmp_path):
    """``fit`` under a torchrun the user started registers the run from rank 0: the recorded
    process and the owner are rank 0 itself, which trains and must be stopped (unlike a kernel)."""
    from jiyu_magics.core.processes.info import process_start_time

    rank0 = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start_time(rank0.pid)
        run = RunStore().create(
            "ddp",
            "own-torchrun",
            status="running",
            pid=rank0.pid,
            pid_started=started,
            owner_pid=rank0.pid,
            owner_started=started,
        )
        done = jiyu("stop", run.id, "--grace", "1")
        assert done.returncode == 0, done.stderr
        assert rank0.wait(timeout=15) is not None, "rank 0 was spared as if it were a kernel"
        assert RunStore().get(run.id).status == "stopped"
    finally:
        rank0.kill()
        rank0.wait()


def test_kill_9_of_the_supervisor_makes_the_run_lost_and_stops_its_ranks(tmp_path):
    run = jobs.submit(write_notebook(tmp_path / "nb.ipynb"), nproc=2, params={"steps": 10_000})
    wait_for(lambda: steps_logged(run.id), what="the first step")
    os.kill(RunStore().get(run.id).pid, signal.SIGKILL)
    lost = wait_for(
        lambda: (
            {r.id: r for r in jobs.list_runs(include_finished=True)}[run.id].status == "lost" and RunStore().get(run.id)
        ),
        30,
        what="lost",
    )
    assert lost.ended and "ended without reporting" in lost.error
    wait_for(lambda: processes_of(run.id) == [], 15, what="the orphaned ranks to stop")
    listing = jiyu("jobs", "--all")
    assert f"{run.id}" in listing.stdout and "lost at step" in listing.stdout
    log = jiyu("logs", run.id, "--tail", "1")  # the log says how it ended, as the supervisor's end line would
    assert re.fullmatch(
        r"\[jiyu\] \d\d:\d\d:\d\d run lost: its process ended without reporting "
        r"\(last heard from at \d\d:\d\d:\d\d\)\n",
        log.stdout,
    ), log.stdout


def test_a_killed_rank_is_restarted_and_resumes_from_its_checkpoint(tmp_path):
    run = jobs.submit(
        write_notebook(tmp_path / "nb.ipynb"),
        nproc=2,
        max_restarts=1,
        params={"steps": 24, "step_seconds": 0.15, "ckpt_every": 4},
    )
    wait_for(lambda: len(steps_logged(run.id)) >= 6, what="six steps")
    victim = next(r for r in ranks.read_all(run.id) if r.rank == 1 and r.restart == 0)
    os.kill(victim.pid, signal.SIGKILL)
    done = finished(run.id)
    assert done.status == "succeeded", done.error
    events = read_events(RunFiles.of(run.id).events)[0]
    restarted = [e for e in events if e["kind"] == "start" and e["restart"] == 1]
    assert restarted, "torchrun did not restart the workers"
    last_done = max(e["step"] for e in events if e["kind"] == "step" and e["restart"] == 0)
    last_ckpt = max(e["step"] for e in events if e["kind"] == "ckpt" and e["step"] <= last_done)
    assert restarted[0]["first_step"] == last_ckpt + 1  # resumed from the last checkpoint
    assert 0 <= last_done - last_ckpt <= 4  # redone: at most one checkpoint interval
    assert [e["step"] for e in events if e["kind"] == "step" and e["restart"] == 1][-1] == 24
    assert_no_processes(run.id)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(nproc=0), "--nproc 0: expected a whole number from 1 to 1024"),
        (dict(nproc=10**9), "--nproc 1000000000: expected a whole number from 1 to 1024"),
        (dict(priority=10**30), "--priority 1000000000000000000000000000000: expected a whole number"),
        (dict(nproc=True), "--nproc True"),
        (dict(max_restarts=-1), "--max-restarts -1"),
        (dict(nnodes=2), "--nnodes 2 needs --rdzv-endpoint"),
        (dict(nnodes=2, rdzv_endpoint="host"), "expected HOST:PORT"),
        (dict(nnodes=2, rdzv_endpoint="h:1", node_rank=2), "--node-rank 2 must be below --nnodes 2"),
        (dict(backend="yarn"), "--backend 'yarn'"),
        (dict(notify="no-such-program-xyz run"), "is not an executable on PATH"),
        (dict(params={"1bad": 1}), "must be a Python identifier"),
        (dict(params={"steps": {1, 2}.__class__}), "cannot be written as a Python literal"),
        (dict(params={"nope": 1}), "unknown parameter nope"),
    ],
)
def test_bad_submissions_are_one_line_errors_and_create_nothing(kwargs, message, tmp_path):
    nb = write_notebook(tmp_path / "nb.ipynb")
    with pytest.raises(jobs.JobError, match=message.replace("(", "\\(").replace("[", "\\[")) as error:
        jobs.submit(nb, **kwargs)
    assert "\n" not in str(error.value) and isinstance(error.value, ValueError)
    assert RunStore().list() == []


def test_bad_paths_and_unknown_ids_are_one_line_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    for path, message in [
        (tmp_path / "missing.ipynb", "no such notebook"),
        (tmp_path / "notes.txt", "is not a Jupyter notebook"),
        ("", "no notebook given"),
    ]:
        with pytest.raises(jobs.JobError, match=message):
            jobs.submit(path)
    with pytest.raises(jobs.JobError, match="no run with id 'feedbeef'"):
        jobs.stop("feedbeef")
    with pytest.raises(jobs.JobError, match="no run with id 'not-hex'"):
        jobs.resolve("not-hex")


@pytest.mark.parametrize(
    "args, message",
    [
        (["submit", "{nb}", "--nproc", "0"], "--nproc 0"),
        (["export", "{nb}", "-o", "{dir}/no/such/folder/job.py"], "cannot write {dir}/no/such/folder/job.py"),
        (["submit", "{dir}/missing.ipynb"], "no such notebook"),
        (["submit", "{nb}", "-p", "lr", "[1,"], "is not a valid Python literal"),
        (["submit", "{nb}", "-p", "steps"], "expected 2 arguments"),
        (["submit", "{nb}", "--stall-timeout", "nan"], "--stall-timeout nan: expected seconds >= 0 (0: off)"),
        (["submit", "{nb}", "--stall-timeout", "inf"], "--stall-timeout inf: expected seconds >= 0 (0: off)"),
        (["stop", "feedbeef"], "no run with id"),
        (["stop", "{run}", "--grace", "inf"], "--grace inf: expected a number of seconds >= 0"),
        (["logs", "feedbeef"], "no run with id"),
        (["logs", "{run}", "--tail", "-5"], "--tail -5: expected a number of lines >= 0"),
        (["logs", "{gone}"], "has no folder any more"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(args, message, tmp_path):
    nb = write_notebook(tmp_path / "nb.ipynb")
    run = ended_run("job", "with-log")
    RunFiles.of(run.id).create().log.write_text("one\ntwo\n")
    gone = ended_run("job", "folder-deleted")
    shutil.rmtree(RunFiles.of(gone.id).root)
    done = jiyu(*[a.format(nb=nb, dir=tmp_path, run=run.id, gone=gone.id) for a in args])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("jiyu") and message.format(dir=tmp_path) in line


def test_cli_submit_logs_and_jobs(tmp_path):
    nb = write_notebook(tmp_path / "nb.ipynb")
    done = jiyu("submit", str(nb), "--nproc-per-node", "2", "-p", "steps", "6", "--name", "cli-run")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[2]
    assert done.stdout.startswith(f"Submitted run {run_id} (cli-run): 2 process(es)")
    assert "Left out of the job (2): cell 3: !nvidia-smi (shell command)" in done.stdout
    assert "Warning: no %%train or fit call: each of the 2 processes runs the notebook whole" in done.stdout
    follow = jiyu("logs", run_id[:4], "-f", timeout=180)
    assert follow.returncode == 0 and "[rank1]: rank 1 done" in follow.stdout and "job succeeded" in follow.stdout
    assert jiyu("logs", run_id, "--tail", "1").stdout.count("\n") == 1
    listing = json.loads(jiyu("jobs", "--all", "--json").stdout)
    assert [(r["id"], r["status"], r["display"]["progress"]) for r in listing] == [(run_id, "succeeded", "6/6")]
    assert listing[0]["exit_code"] == 0 and listing[0]["kind"] == "job" and listing[0]["derived"] is False
    assert not {"pid", "owner_pid", "queue_rank", "polled"} & set(listing[0]), "the store's bookkeeping stays private"
    assert "No active runs" in jiyu("jobs").stdout


def test_jiyu_logs_shows_a_coloured_traceback_as_text():
    """A ranks pool's log holds its ranks' IPython tracebacks in colour: ``jiyu logs`` printed
    the codes (``[91mValueError[39m``) into files, pagers and notebook cells."""
    run = ended_run("ranks", "pool", status="failed")
    traceback = coloured_traceback()
    RunFiles.of(run.id).create().log.write_text(f"[rank0]: ready\n{traceback}\n[rank0]: after\n")
    plain = re.sub(r"\x1b\[[0-9;]*m", "", traceback)
    for args, expected in (
        ((), f"[rank0]: ready\n{plain}\n[rank0]: after\n"),
        (("--tail", "2"), f"{plain.splitlines()[-1]}\n[rank0]: after\n"),
        (("-f",), f"[rank0]: ready\n{plain}\n[rank0]: after\n"),
    ):
        shown = jiyu("logs", run.id, *args)
        assert shown.returncode == 0 and "\x1b" not in shown.stdout, (args, shown.stdout)
        assert shown.stdout == expected, args


def test_a_notebook_without_code_is_refused_and_creates_nothing(tmp_path):
    """An unsaved new notebook reaches the disk with no code cells: it must not "succeed" empty."""
    import nbformat
    from nbformat.v4 import new_markdown_cell, new_notebook

    nb = tmp_path / "Untitled.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# draft")]), nb)
    done = jiyu("submit", str(nb))
    assert done.returncode == 2 and "has no code to run" in done.stderr and done.stderr.count("\n") == 1
    assert RunStore().list() == []


def test_submit_warns_of_interactive_calls_that_block_a_job(tmp_path):
    nb = tmp_path / "login.ipynb"
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell("use_hub = False"),
                new_code_cell(
                    "if use_hub:\n    from huggingface_hub import notebook_login\n    notebook_login()\n"
                    "    name = input('name? ')\n"
                    "print('done')"
                ),
            ]
        ),
        nb,
    )
    done = jiyu("submit", str(nb))
    assert done.returncode == 0, done.stderr
    assert "Warning: cell 2 calls notebook_login(): an interactive login never completes in a job" in done.stdout
    assert "Warning: cell 2 calls input(): nobody can answer it in a job" in done.stdout
    assert "runs the notebook whole" not in done.stdout  # one process: nothing runs twice
    finished(done.stdout.split()[2])


def test_more_processes_than_visible_gpus_is_refused(nvml_double, tmp_path, monkeypatch):
    nb = write_notebook(tmp_path / "nb.ipynb")
    with pytest.raises(jobs.JobError, match=r"--nproc 3 is more than the 2 GPU\(s\) visible here"):
        jobs.submit(nb, nproc=3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(jobs.JobError, match=r"--nproc 2 is more than the 1 GPU\(s\) visible here"):
        jobs.submit(nb, nproc=2)
    assert RunStore().list() == []


@pytest.mark.parametrize("node_ranks", [(None, None), (0, 1)], ids=["c10d", "static"])
def test_two_nodes_meet_at_the_rendezvous_endpoint(node_ranks, tmp_path):
    """Two submissions on this machine act as two nodes of one job (1 rank each)."""
    nb = write_notebook(tmp_path / "nb.ipynb")
    endpoint = f"127.0.0.1:{free_port()}"
    runs = [
        jobs.submit(nb, nproc=1, nnodes=2, rdzv_endpoint=endpoint, node_rank=rank, params={"steps": 4}, name=f"node{i}")
        for i, rank in enumerate(node_ranks)
    ]
    assert [finished(r.id).status for r in runs] == ["succeeded", "succeeded"]
    starts = [e for r in runs for e in read_events(RunFiles.of(r.id).events)[0] if e["kind"] == "start"]
    assert len(starts) == 1 and starts[0]["world_size"] == 2  # one global rank 0 across both "nodes"
    launch = json.loads((RunFiles.of(runs[-1].id).root / "launch.json").read_text())
    assert (launch["nnodes"], launch["rdzv_endpoint"], launch["node_rank"]) == (2, endpoint, node_ranks[-1])
