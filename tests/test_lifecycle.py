"""The one owner of a run's lifecycle (``jobs.lifecycle``), on real 2-rank gloo torchrun runs:
the states it goes through, the one final-status rule in each of its cases, what the end adds
to the event log, and that nothing of the run is left running, however it ended."""

from __future__ import annotations

import os
import threading

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import RunKind, RunStatus
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.final_status import Outcome, closing_events, decide, final_status, fit_end_status
from jiyu_magics.jobs.launch_spec import LaunchSpec
from jiyu_magics.jobs.lifecycle import RunLifecycle, record_end, record_end_without_owner

from .jobs_workload import processes_of, steps_logged, wait_for, write_script

S = RunStatus
STARTED = [S.QUEUED, S.STARTING, S.RUNNING]

# Rank 0's engine honoured a stop and both ranks exited cleanly: torchrun exits 0.
ENDS_STOPPED = """
import os
from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles

if os.environ["RANK"] == "0":
    with EventLog(RunFiles.of(os.environ["JIYU_RUN_ID"]).events) as log:
        log.append("start", total_steps=10)
        log.append("step", step=3, loss=1.0)
        log.append("end", status="stopped", step=3, message="Stopped at step 3/10 by request.")
"""

# Rank 0 leaves a process of its own behind, in a session of its own (outside torchrun's tree).
LEAVES_A_DAEMON = """
import os, subprocess, sys
if os.environ["RANK"] == "0":
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open("daemon.pid", "w").write(str(daemon.pid))
"""


@pytest.fixture(autouse=True)
def torchrun_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # torchrun leaves torchelastic_* folders there
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)


def lifecycle_of(tmp_path, script: str | None = None, **workload) -> RunLifecycle:
    lifecycle = RunLifecycle.register(RunKind.DDP, "lifecycle-test", LaunchSpec(nproc=2), owner="test")
    if script is None:
        write_script(lifecycle.files.script, **workload)
    else:
        lifecycle.files.script.write_text(script)
    return lifecycle


def statuses(lifecycle: RunLifecycle) -> list[str]:
    """The states the run went through, as the store noted each move."""
    return [to for _, to, _ in RunStore().history(lifecycle.run_id)]


def events_of(lifecycle: RunLifecycle) -> list[dict]:
    return read_events(lifecycle.files.events)[0]


def test_a_run_that_succeeds_goes_through_every_state_and_ends_as_rank0_said(tmp_path):
    lifecycle = lifecycle_of(tmp_path, steps=6)
    assert lifecycle.start() and RunStore().get(lifecycle.run_id).status == "running"
    lifecycle.wait()
    # torchrun (the recorded pid) has exited, the owner (this process, as a kernel) has not
    # recorded the end yet: a listing in this moment must not mark the run lost
    (listed,) = RunStore().list()
    assert (listed.status, listed.pid, listed.owner_pid) == ("running", lifecycle.handle.pid, os.getpid())
    outcome = lifecycle.end()
    assert (outcome.status, outcome.exit_code, outcome.error) == (RunStatus.SUCCEEDED, 0, None)
    assert statuses(lifecycle) == [*STARTED, S.SUCCEEDED]
    run = RunStore().get(lifecycle.run_id)
    assert (run.status, run.exit_code, run.error, run.pid) == ("succeeded", 0, None, lifecycle.handle.pid)
    ends = [e for e in events_of(lifecycle) if e["kind"] == "end"]
    assert ends == [ends[0]] and "source" not in ends[0], "rank 0 wrote the end: the owner adds none"
    assert [(r.rank, r.state) for r in lifecycle.ranks()] == [(0, "exited"), (1, "exited")]
    assert lifecycle.end() is outcome  # ending twice records nothing new
    assert processes_of(lifecycle.run_id) == []


def test_a_failing_rank_fails_the_run_with_that_ranks_line(tmp_path):
    lifecycle = lifecycle_of(tmp_path, steps=50, fail_rank=1, fail_step=3)
    lifecycle.start()
    lifecycle.wait()
    outcome = lifecycle.end()
    assert outcome.status is RunStatus.FAILED and outcome.exit_code not in (0, None)
    assert outcome.error == "rank 1: RuntimeError: rank 1 gave up at step 3"
    run = RunStore().get(lifecycle.run_id)
    assert (run.status, run.error) == ("failed", outcome.error)
    error, end = events_of(lifecycle)[-2:]
    assert (error["kind"], error["message"]) == ("error", outcome.error)
    assert (end["kind"], end["status"], end["exit_code"]) == ("end", "failed", outcome.exit_code)
    assert processes_of(lifecycle.run_id) == []


def test_a_stop_request_in_the_store_stops_every_process_and_the_run_is_stopped(tmp_path):
    """As ``jiyu stop`` from another host does: no signal reaches the owner, only the row."""
    lifecycle = lifecycle_of(tmp_path, steps=10_000, step_seconds=0.05)
    lifecycle.start()

    def ask_to_stop():
        wait_for(lambda: len(steps_logged(lifecycle.run_id)) >= 2, what="two steps")
        RunStore().request_stop(lifecycle.run_id, 10.0)  # time to checkpoint on a loaded machine

    asker = threading.Thread(target=ask_to_stop)
    asker.start()
    lifecycle.wait()
    asker.join()
    outcome = lifecycle.end()
    step = max(e["step"] for e in events_of(lifecycle) if e["kind"] == "step")
    checkpoint = RunFiles.of(lifecycle.run_id).ckpt / "last.pt"
    line = (  # the run store's name: this workload's start event names none
        f"stopped at step {step} by request; checkpoint {checkpoint}; resume with %train --resume {checkpoint}"
        " --name lifecycle-test"
    )
    # the stop reached the ranks, not torchrun: each ended its script cleanly, and so did torchrun
    assert (outcome.status, outcome.exit_code, outcome.error) == (RunStatus.STOPPED, 0, line)
    assert statuses(lifecycle) == [*STARTED, S.STOPPING, S.STOPPED] and lifecycle.stop_grace == 10.0
    assert {(r.state, r.exit_code, r.stopped) for r in lifecycle.ranks()} == {("exited", 0, True)}
    assert RunStore().get(lifecycle.run_id).status == "stopped"
    assert events_of(lifecycle)[-1] | {"t": 0} == {
        "t": 0,
        "kind": "end",
        "status": "stopped",
        "source": "lifecycle",
        "exit_code": 0,
        "message": line,
    }
    assert "Traceback" not in lifecycle.files.log.read_text()
    assert processes_of(lifecycle.run_id) == []


def test_jiyu_stop_of_a_run_owned_elsewhere_is_recorded_by_its_owner(tmp_path):
    """``jobs.stop`` (``jiyu stop``, ``%job stop``, the panel) on a run whose owner lives in
    another process, as a kernel owns ``%%train --nproc``: the same stop procedure ends the
    ranks, and the owner records the end, stopped."""
    lifecycle = lifecycle_of(tmp_path, steps=10_000, step_seconds=0.05)
    lifecycle.start()
    wait_for(lambda: steps_logged(lifecycle.run_id), what="the first step")
    stopper = threading.Thread(target=lambda: jobs.stop(lifecycle.run_id, grace=5))
    stopper.start()
    lifecycle.wait()
    outcome = lifecycle.end()
    stopper.join()
    assert outcome.status is RunStatus.STOPPED and RunStore().get(lifecycle.run_id).status == "stopped"
    assert [e["source"] for e in events_of(lifecycle) if e["kind"] == "end"] == ["lifecycle"], "one end, the owner's"
    assert processes_of(lifecycle.run_id) == []


def test_a_stop_that_crosses_the_last_step_still_succeeded(tmp_path):
    """The stop comes when the ranks have already finished: torchrun exited 0 and rank 0's end
    says succeeded, so the run succeeded, though a stop was requested."""
    lifecycle = lifecycle_of(tmp_path, steps=4)
    lifecycle.start()
    lifecycle.wait()
    lifecycle.request_stop()
    outcome = lifecycle.end()
    assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCEEDED, 0)
    assert lifecycle.stop_result is None, "nothing was left to stop"
    assert statuses(lifecycle) == [*STARTED, S.STOPPING, S.SUCCEEDED]
    run = RunStore().get(lifecycle.run_id)
    assert run.stop_requested and run.status == "succeeded"
    assert processes_of(lifecycle.run_id) == []


def test_a_clean_exit_after_rank0_honoured_a_stop_is_stopped(tmp_path):
    lifecycle = lifecycle_of(tmp_path, ENDS_STOPPED)
    lifecycle.start()
    lifecycle.wait()
    outcome = lifecycle.end()
    assert (outcome.status, outcome.exit_code) == (RunStatus.STOPPED, 0)
    assert RunStore().get(lifecycle.run_id).status == "stopped"
    assert [e["status"] for e in events_of(lifecycle) if e["kind"] == "end"] == ["stopped"]


def test_the_end_sweeps_a_process_a_rank_left_behind(tmp_path):
    lifecycle = lifecycle_of(tmp_path, LEAVES_A_DAEMON)
    lifecycle.start()
    lifecycle.wait()
    daemon = int((tmp_path / "daemon.pid").read_text())
    assert daemon in processes_of(lifecycle.run_id), "the daemon carries the run id and outlived torchrun"
    assert lifecycle.end().status is RunStatus.SUCCEEDED
    assert processes_of(lifecycle.run_id) == []


def test_an_error_in_the_owner_kills_the_ranks_and_fails_the_run_with_that_error(tmp_path):
    lifecycle = lifecycle_of(tmp_path, steps=10_000, step_seconds=0.05)
    with pytest.raises(RuntimeError, match="the dashboard broke"):
        with lifecycle:
            lifecycle.start()
            wait_for(lambda: steps_logged(lifecycle.run_id), what="the first step")
            raise RuntimeError("the dashboard broke")
    assert lifecycle.outcome.status is RunStatus.FAILED
    assert lifecycle.outcome.error == "test error: RuntimeError: the dashboard broke"
    assert statuses(lifecycle) == [*STARTED, S.FAILED]
    assert RunStore().get(lifecycle.run_id).error == lifecycle.outcome.error
    assert processes_of(lifecycle.run_id) == []


def test_a_stop_before_the_start_starts_nothing(tmp_path):
    lifecycle = lifecycle_of(tmp_path, steps=4)
    RunStore().request_stop(lifecycle.run_id)
    assert lifecycle.start() is False and lifecycle.handle is None
    outcome = lifecycle.end()
    assert (outcome.status, outcome.exit_code, outcome.error) == (RunStatus.STOPPED, None, "stopped before it started")
    assert statuses(lifecycle) == [S.QUEUED, S.STOPPED]
    assert [e["status"] for e in events_of(lifecycle) if e["kind"] == "end"] == ["stopped"]


def test_an_interrupt_before_the_start_is_a_stop(tmp_path):
    lifecycle = lifecycle_of(tmp_path, steps=4)
    with pytest.raises(KeyboardInterrupt):
        with lifecycle:
            raise KeyboardInterrupt
    assert (lifecycle.outcome.status, lifecycle.outcome.error) == (RunStatus.STOPPED, "stopped before it started")
    assert RunStore().get(lifecycle.run_id).status == "stopped"


# -- the rule alone ------------------------------------------------------------------------------
def start(**fields):
    return {"kind": "start", **fields}


def end(status, **fields):
    return {"kind": "end", "status": status, **fields}


@pytest.mark.parametrize(
    "code, stop, events, expected",
    [
        (0, False, [start(), end("succeeded")], "succeeded"),
        (0, True, [start(), end("succeeded")], "succeeded"),  # the stop crossed the last step
        (0, True, [start(), end("stopped")], "stopped"),
        (0, False, [start(), end("stopped")], "stopped"),  # rank 0 honoured a stop of its own
        (0, False, [], "succeeded"),  # no fit at all: a plain script
        (0, False, [start(), end("failed")], "succeeded"),  # a clean exit is never a failure
        (0, True, [start(), end("stopped"), start()], "succeeded"),  # the last fit's end is what counts
        (0, True, [start(), end("stopped", source="lifecycle")], "succeeded"),  # an owner's end is not rank 0's
        (1, True, [start(), end("succeeded")], "stopped"),
        (-9, False, [start(), end("succeeded")], "failed"),
        (None, True, [], "stopped"),  # never started, or no exit code seen
        (None, False, [], "failed"),
    ],
)
def test_final_status_rule(code, stop, events, expected):
    assert final_status(code, stop, events) == expected


def test_the_fit_end_is_the_end_after_the_last_start():
    assert fit_end_status([start(), end("succeeded"), start()]) is None
    assert fit_end_status([start(), end("succeeded"), start(), end("stopped", step=9)]) == "stopped"


def test_closing_events_add_only_what_rank0_did_not_write():
    succeeded = decide(0, False, [start(), end("succeeded")], None)
    assert closing_events([start(), end("succeeded")], succeeded) == []
    failed = decide(1, False, [], "rank 1: ValueError: bad")
    assert [k for k, _ in closing_events([start()], failed)] == ["error", "end"]
    already = [start(), {"kind": "error", "message": "rank 1: ValueError: bad"}, end("failed")]
    assert closing_events(already, failed) == []
    stopped = decide(1, True, [], "rank 0: killed")
    assert stopped.error == "stopped by request"
    assert closing_events([start(), end("stopped")], stopped) == []
    assert closing_events([start()], stopped) == [
        ("end", {"status": "stopped", "exit_code": 1, "source": "lifecycle", "message": "stopped by request"})
    ]


def test_the_first_recorded_end_stands_in_the_row_and_in_the_log():
    store = RunStore()
    run = store.create("job", "twice", status="running")
    record_end(store, run.id, Outcome(RunStatus.FAILED, 1, "rank 0: ValueError: bad"))
    record_end(store, run.id, Outcome(RunStatus.SUCCEEDED, 0, None))
    assert (store.get(run.id).status, store.get(run.id).error) == ("failed", "rank 0: ValueError: bad")
    events = read_events(RunFiles.of(run.id).events)[0]
    assert [(e["kind"], e.get("status")) for e in events] == [("error", None), ("end", "failed")]


@pytest.mark.parametrize(
    "stop, started, expected",
    [
        (True, True, ("stopped", "stopped by request")),
        (True, False, ("stopped", "stopped before it started")),
        (False, False, ("failed", "could not start: no sbatch")),
    ],
)
def test_an_end_without_owner_follows_the_same_rule(stop, started, expected):
    store = RunStore()
    run = store.create("job", "orphan", status="running" if started else "queued")
    if stop:
        store.request_stop(run.id)
    ended = record_end_without_owner(store, run.id, "could not start: no sbatch")
    assert (ended.status, ended.error, ended.exit_code) == (*expected, None)
