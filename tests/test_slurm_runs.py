"""Runs on a real Slurm (tests/slurm_cluster.py: slurmctld + slurmd on this machine), submitted
and followed end to end: a 2-process CPU job (gloo) from a notebook through ``%submit --backend
slurm``, seen in ``jiyu logs``, ``%jobs`` and the REST API; a failing rank; ``jiyu stop``,
``%job stop`` and the panel's stop; a pending job; the time limit with its requeue; bad options
and Slurm's own refusals; a script submitted by hand. ``pytest -m slurm`` runs them alone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.events.log import summarize
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs import scheduler_follower
from jiyu_magics.jobs.backends.slurm import commands as slurm_commands
from jiyu_magics.jobs.run_upkeep import upkeep

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, wait_for
from .notebook_runner import execute, html_of, notebook, screenshot_html, text_of
from .server_fixtures import body
from .slurm_workload import ended, events, job_state, write_notebook

pytestmark = pytest.mark.slurm
CPU_JOB = {"gpus_per_node": 0}  # the test node has no GPU: ranks on gloo, --cpus-per-task instead of --gres


async def test_a_notebook_job_on_slurm_is_followed_to_its_end_everywhere(
    slurm, jp_fetch, tmp_path, torchrun_tmp, artifacts
):
    workload = write_notebook(tmp_path / "train.ipynb")
    nb = execute(
        notebook(
            "%load_ext jiyu_magics",
            f"run = %submit {workload} --backend slurm --nproc 2 --gpus-per-node 0 -p steps 60 "
            "-p step_seconds 0.15 --name on-slurm",
            "%jobs",
        ),
        tmp_path,
    )
    said = text_of(nb.cells[1])
    assert " for slurm: submitted as Slurm job " in said and "Follow it: %job logs " in said, said
    run_id = said.split()[1]
    job_id = RunStore().get(run_id).scheduler_id
    assert job_id and job_id.isdigit()
    table = html_of(nb.cells[2])
    assert f"<code>{run_id}</code>" in table and "<td>slurm</td>" in table and ("queued" in table or "running" in table)

    seen, shown = set(), None  # the server follows the job: each GET asks Slurm, at most every few seconds
    for _ in range(240):
        record = body(await jp_fetch("jiyu", "api", "runs", run_id))
        seen.add(record["status"])
        if record["status"] not in ("queued", "running"):
            break
        if shown is None and record["status"] == "running" and record["summary"]["step"]:
            shown = html_of(execute(notebook("%load_ext jiyu_magics", "%jobs"), tmp_path).cells[1])
        await asyncio.sleep(1)
    assert record["status"] == "succeeded", record
    assert "running" in seen and record["scheduler_id"] == job_id and record["backend"] == "slurm"
    assert shown and ">running<" in shown and "<progress" in shown, "%jobs in a kernel showed the run training"
    screenshot_html(shown, artifacts / "slurm_jobs_table.html", "900,90")
    summary = record["summary"]
    assert summary["step"] == 60 and summary["loss"] is not None and summary["end_status"] == "succeeded"
    log = body(await jp_fetch("jiyu", "api", "runs", run_id, "log"))
    assert "[rank0]" in log["text"] and "[rank1]" in log["text"] and log["active"] is False
    assert log["text"].rstrip().endswith("slurm job succeeded")

    logs = jiyu("logs", run_id)
    assert logs.returncode == 0 and f"Slurm job {job_id}, attempt 1" in logs.stdout
    assert "RuntimeWarning" not in logs.stdout, "a rank's entry point must not be imported before runpy runs it"
    assert "Trained 60 steps" in logs.stdout and f"{summary['loss']:.4g}" in logs.stdout
    listed = json.loads(jiyu("jobs", "--all", "--json").stdout)
    (row,) = [r for r in listed if r["id"] == run_id]
    assert row["display"]["kind"] == "slurm" and row["display"]["loss"] == f"{summary['loss']:.4g}"

    after = execute(notebook("%load_ext jiyu_magics", "%jobs --all"), tmp_path)
    assert f"<code>{run_id}</code>" in html_of(after.cells[1]) and ">succeeded<" in html_of(after.cells[1])
    assert job_state(slurm, job_id) == "COMPLETED" and slurm.jobs() == []
    # without accounting, Slurm's text completion log keeps the end after scontrol forgets the job
    assert slurm_commands.completion_log(job_id).state == "COMPLETED"
    assert_no_processes(run_id)


def test_a_failing_rank_ends_the_run_with_that_ranks_line(slurm, tmp_path, torchrun_tmp):
    run = jobs.submit(
        write_notebook(tmp_path / "fail.ipynb", fail_rank=1, steps=200), backend="slurm", nproc=2, slurm=CPU_JOB
    )
    done = ended(run.id)
    assert (done.status, done.error) == ("failed", "rank 1: RuntimeError: rank 1 gave up at step 3")
    assert job_state(slurm, run.scheduler_id) == "FAILED"
    log = jiyu("logs", run.id).stdout
    assert "RuntimeError: rank 1 gave up at step 3" in log
    assert log.rstrip().endswith("slurm job failed (exit code 1): rank 1: RuntimeError: rank 1 gave up at step 3")
    assert events(run.id, "error")[-1]["message"] == done.error
    assert_no_processes(run.id)


def test_jiyu_stop_cancels_the_job_after_its_ranks_checkpoint(slurm, tmp_path, torchrun_tmp):
    run = jobs.submit(
        write_notebook(tmp_path / "long.ipynb", steps=100000, step_seconds=0.05),
        backend="slurm",
        nproc=2,
        slurm=CPU_JOB,
    )
    wait_for(lambda: events(run.id, "step"), 180, what="a training step on Slurm")
    began = time.monotonic()
    done = jiyu("stop", run.id, "--grace", "30")
    took = time.monotonic() - began
    assert done.returncode == 0 and done.stdout.strip().endswith(": stopped."), done.stderr
    stopped = RunStore().get(run.id)
    end = events(run.id, "end")[0]
    assert end["status"] == "stopped" and "a stop request (SIGTERM)" in end["message"], end
    assert events(run.id, "ckpt")[-1]["step"] == end["step"], "the ranks checkpointed the step they stopped at"
    checkpoint = events(run.id, "ckpt")[-1]["path"]  # the one stop rule's line, as for a local job
    assert (stopped.status, stopped.error) == (
        "stopped",
        f"stopped at step {end['step']} by request; checkpoint {checkpoint}; resume with %train --resume {checkpoint}"
        f" --name {events(run.id, 'start')[-1].get('name') or run.name}",
    )
    assert slurm.jobs() == [] and took < 30, "the job left the queue within the grace"
    assert_no_processes(run.id, within=1)


async def test_a_pending_job_is_queued_with_slurms_reason_and_a_stop_withdraws_it(slurm, jp_fetch, ip, tmp_path):
    blocker = slurm.run(
        "sbatch", "--parsable", f"--cpus-per-task={slurm.cpus}", "--output=/dev/null", "--wrap", "sleep 300", check=True
    ).stdout.strip()
    wait_for(lambda: job_state(slurm, blocker) == "RUNNING", 30, what="the blocking job to run")
    workload = write_notebook(tmp_path / "train.ipynb")
    waiting = [jobs.submit(workload, backend="slurm", nproc=2, slurm=CPU_JOB, name=f"waits-{i}") for i in (1, 2)]
    for run in waiting:
        wait_for(
            lambda run=run: jobs.resolve(run.id).queue_reason in ("Resources", "Priority"),
            30,
            what="Slurm's reason for the wait",
        )
    listed = jiyu("jobs").stdout
    assert "queued (Resources)" in listed or "queued (Priority)" in listed, listed
    record = body(await jp_fetch("jiyu", "api", "runs", waiting[0].id))
    assert record["status"] == "queued" and record["queue_reason"] in ("Resources", "Priority")

    stopped = body(await jp_fetch("jiyu", "api", "runs", waiting[0].id, "stop", method="POST", body=b"{}"))
    assert (stopped["status"], stopped["error"]) == ("stopped", "stopped before it started")  # the panel's Stop
    ip.run_line_magic("job", f"stop {waiting[1].id}")
    assert RunStore().get(waiting[1].id).status == "stopped"  # %job stop
    assert [job_state(slurm, r.scheduler_id) for r in waiting] == ["CANCELLED", "CANCELLED"]
    assert slurm.jobs() == [blocker], "only the blocking job is left in the queue"


def test_the_time_limit_checkpoints_requeues_and_resumes_at_the_saved_step(slurm, tmp_path, torchrun_tmp):
    """A 1-minute limit, the first attempt too slow to finish in it: Slurm signals the job
    (USR1, 5 s ahead, at its next 30 s check), the ranks checkpoint, the job requeues, and the
    second attempt resumes from that checkpoint and completes."""
    nb = write_notebook(tmp_path / "slow.ipynb", steps=120, first_attempt_seconds=1.0)
    run = jobs.submit(
        nb, backend="slurm", nproc=2, slurm={**CPU_JOB, "time": "1", "checkpoint_grace": 5, "max_requeues": 2}
    )
    seen = []

    def look():
        current = jobs.resolve(run.id)
        if not seen or seen[-1] != (current.status, current.queue_reason):
            seen.append((current.status, current.queue_reason))
        return None if current.active else current

    done = wait_for(look, 300, every=1, what="the run to end after its requeue")
    assert done.status == "succeeded", (done.error, seen)
    assert ("queued", "BeginTime, requeued 1x") in seen, seen  # back in Slurm's queue, not ended

    first, second = events(run.id, "start")[:2]
    stop = events(run.id, "end")[0]
    assert first["start_step"] == 0 and stop["status"] == "stopped" and "time limit" in stop["message"]
    saved = [e for e in events(run.id, "ckpt") if e["step"] == stop["step"]]
    assert saved and second["start_step"] == stop["step"] > 0 and second["resumed_from"] == saved[0]["path"]
    assert events(run.id, "end")[-1]["status"] == "succeeded" and summarize(RunFiles.of(run.id).events)["step"] == 120
    fields = slurm_commands.parse_fields(slurm.run("scontrol", "show", "job", "-o", run.scheduler_id).stdout)
    assert fields["JobState"] == "COMPLETED" and int(fields["Restarts"]) >= 1
    log = RunFiles.of(run.id).log.read_text()
    assert "5 s to the time limit: checkpointing" in log and "requeued (1 of 2)" in log and "attempt 2" in log
    assert_no_processes(run.id)


@pytest.mark.parametrize(
    "options, said",
    [
        (["--time", "1:2:3:4"], "--time '1:2:3:4': expected minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]"),
        (["--partition", "gpu\n#SBATCH --uid=0"], "--partition 'gpu\\n#SBATCH --uid=0': not a value Slurm accepts"),
        (["--time", "1", "--checkpoint-grace", "120"], "--checkpoint-grace 120 s is not shorter than --time 1 (60 s)"),
        (["--sbatch-arg=--output=/tmp/elsewhere"], "--sbatch-arg --output=/tmp/elsewhere: jiyu sets --output itself"),
        (["--sbatch-arg=--comment=two words"], "expected one sbatch option without spaces"),
        (["--max-requeues", "-1"], "--max-requeues -1: expected a whole number >= 0"),
    ],
)
def test_bad_slurm_options_are_refused_before_sbatch_runs(slurm, tmp_path, options, said):
    done = jiyu("submit", str(write_notebook(tmp_path / "nb.ipynb")), "--backend", "slurm", *options)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert RunStore().list() == [] and slurm.jobs() == []


def test_slurm_options_need_the_slurm_backend(tmp_path, no_schedulers):
    done = jiyu("submit", str(write_notebook(tmp_path / "nb.ipynb")), "--time", "10", "--sbatch-arg=--exclusive")
    assert done.returncode == 2 and "--time, --sbatch-arg: Slurm options, for --backend slurm only" in done.stderr


@pytest.mark.parametrize(
    "options, slurm_said",
    [
        (["--partition", "nowhere"], "invalid partition specified: nowhere"),
        (["--mem", "100000G"], "Requested node configuration is not available"),
    ],
)
def test_a_refusal_by_sbatch_is_one_line_in_slurms_words(slurm, tmp_path, options, slurm_said):
    done = jiyu(
        "submit", str(write_notebook(tmp_path / "nb.ipynb")), "--backend", "slurm", "--gpus-per-node", "0", *options
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "sbatch refused the job: " in done.stderr and slurm_said in done.stderr
    (run,) = RunStore().list()
    assert run.status == "failed" and run.error.startswith("could not start: sbatch refused the job")
    assert slurm.jobs() == []


def test_an_unconfigured_slurm_says_how_and_a_script_submitted_by_hand_is_followed(
    slurm, tmp_path, monkeypatch, torchrun_tmp
):
    """sbatch is installed but not configured here (its config cannot be read): the batch script
    is written, the run waits saying how to submit it; submitted by hand on the cluster (here:
    with the cluster's SLURM_CONF), the job writes its id into the run folder and is followed."""
    (tmp_path / "empty.conf").write_text("")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "empty.conf"))
    done = jiyu(
        "submit",
        str(write_notebook(tmp_path / "nb.ipynb", steps=10)),
        "--backend",
        "slurm",
        "--gpus-per-node",
        "0",
        "--nproc",
        "2",
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert "Slurm is not configured on this machine (Unable to process configuration file)" in first
    (run,) = RunStore().list()
    script = RunFiles.of(run.id).root / "job.sbatch"
    assert f"submit it on the cluster's login node with `sbatch {script}`" in first
    assert jobs.resolve(run.id).queue_reason == f"not submitted: run `sbatch {script}` on the cluster"

    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    slurm.run("sbatch", str(script), check=True)
    # the follower the submit started reads Slurm with the environment it had (no config): it
    # goes, as with the login session that started it, and the next upkeep of a run owner (the
    # Jupyter server's, every 10 s) starts one that can
    stale = wait_for(scheduler_follower.running_pid, 30, what="the follower the submit started")
    os.kill(stale, signal.SIGTERM)
    wait_for(lambda: scheduler_follower.running_pid() is None, 30, what="the old follower gone")
    upkeep()
    finished = ended(run.id)
    assert (
        finished.status == "succeeded"
        and finished.scheduler_id == slurm_commands.completion_log(finished.scheduler_id).job_id
    )
    assert_no_processes(run.id)


def test_a_job_slurm_forgot_without_accounting_is_lost_not_running_forever(slurm, tmp_path):
    """A run whose job Slurm purged (after MinJobAge) before anyone looked, on a cluster without
    accounting and with no record of it in the completion log (and a run folder without its launch
    spec, as after a store repair): lost, with the reason."""
    run = RunStore().create("job", "forgotten", backend="slurm", scheduler_id="987654", nproc=2)
    RunFiles.of(run.id).create()
    assert slurm_commands.show("987654") is None and slurm_commands.accounting("987654") is None
    assert jobs.resolve(run.id).status == "queued", "a read writes nothing, nor asks Slurm"
    scheduler_follower.follow_all(RunStore())  # one round of the follower, the run's owner
    found = jobs.resolve(run.id)
    assert found.status == "lost" and found.error.startswith("Slurm no longer knows job 987654")
