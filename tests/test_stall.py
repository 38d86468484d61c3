"""Stall detection on real 2-rank gloo torchrun runs of the training engine: rank 1 sleeps
before a collective, the run's owner (``jobs.lifecycle``) flags it ``stalled`` within its
timeout, dumps both ranks' stacks naming the lines they wait on, and a stop leaves nothing.
The fold it rests on (``core.stall_clock``) is tested on its own first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.events.stall_clock import DEFAULT_MIN_TIMEOUT_S, StallClock
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import RunKind, RunStatus
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.launch_spec import LaunchSpec
from jiyu_magics.jobs.lifecycle import RunLifecycle

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, wait_for
from .monitoring_tools import program
from .stall_workload import SLEEP_LINE, STALL_AT, stall_script


def step(t: float, n: int) -> dict:
    return {"kind": "step", "t": t, "step": n}


def test_the_default_timeout_is_ten_median_steps_but_at_least_five_minutes():
    clock = StallClock()
    clock.feed([{"kind": "start", "t": 0.0}, *(step(60.0 * n, n) for n in range(1, 6))])
    assert clock.timeout == 600.0  # one step a minute: 10 minutes
    fast = StallClock()
    fast.feed([{"kind": "start", "t": 0.0}, step(1.0, 100), step(2.0, 200)])
    assert fast.timeout == DEFAULT_MIN_TIMEOUT_S
    assert fast.stalled_since(2.0 + 299) is None and fast.stalled_since(2.0 + 300) == 2.0


def test_the_calls_timeout_beats_the_jobs_and_zero_turns_it_off():
    clock = StallClock(default_timeout=7.0)
    clock.feed([{"kind": "start", "t": 0.0}])
    assert clock.timeout == 7.0 and clock.stalled_since(7.0) == 0.0
    clock.feed([{"kind": "start", "t": 10.0, "stall_timeout": 0}])
    assert clock.timeout is None and clock.stalled_since(1e9) is None
    clock.feed([{"kind": "start", "t": 20.0, "stall_timeout": 2.0}])
    assert clock.stalled_since(22.0) == 20.0


def test_a_moving_step_or_an_ended_call_is_not_a_stall():
    clock = StallClock(default_timeout=5.0)
    clock.feed([{"kind": "start", "t": 0.0}, step(4.0, 3), step(8.0, 6)])
    assert clock.stalled_since(12.0) is None and clock.stalled_since(13.0) == 8.0
    clock.feed([step(13.5, 6)])  # logged again without moving: still stalled since 8
    assert clock.stalled_since(14.0) == 8.0
    clock.feed([{"kind": "end", "t": 14.0, "status": "succeeded"}])
    assert clock.stalled_since(100.0) is None, "after fit returned, nothing is watched"


@pytest.fixture
def stalling_run(torchrun_tmp, monkeypatch):
    monkeypatch.chdir(torchrun_tmp)
    lifecycle = RunLifecycle.register(RunKind.DDP, "stalls", LaunchSpec(nproc=2), owner="test")
    lifecycle.files.script.write_text(stall_script(timeout=3.0))
    lifecycle.stop_grace = 2.0
    yield lifecycle
    lifecycle.kill()
    lifecycle.end()


def follow_until(lifecycle: RunLifecycle, predicate, timeout: float, what: str):
    """The owner's follow loop (as the supervisor and ``%%train --nproc`` run it), until ``predicate``."""

    def polled():
        assert lifecycle.running(), "the ranks ended before " + what
        return predicate()

    return wait_for(polled, timeout, every=0.25, what=what)


def test_a_rank_asleep_before_a_collective_is_flagged_stalled_with_both_stacks(stalling_run):
    lifecycle, store = stalling_run, RunStore()
    assert lifecycle.start()
    run = follow_until(
        lifecycle, lambda: (lambda r: r if r.stalled else None)(store.get(lifecycle.run_id)), 120, "the stall flag"
    )
    assert run.status == RunStatus.RUNNING, "stalled is a flag beside running, not a status"
    events = read_events(lifecycle.files.events)[0]
    steps = [e for e in events if e["kind"] == "step"]
    assert steps and steps[-1]["step"] < STALL_AT and run.stalled_since == pytest.approx(steps[-1]["t"])
    assert time.time() - run.stalled_since < 3.0 + 10.0, "flagged soon after its 3 s timeout"
    stall = follow_until(
        lifecycle,
        lambda: [e for e in read_events(lifecycle.files.events)[0] if e["kind"] == "stall"],
        30,
        "the stall event",
    )[0]
    assert (stall["step"], stall["timeout"]) == (steps[-1]["step"], 3.0)
    shown = jiyu("jobs")
    assert "running, stalled: no step for" in shown.stdout, shown.stdout
    stacks = jiyu("stacks", lifecycle.run_id)
    assert stacks.returncode == 0, stacks.stderr
    headlines = stacks.stdout.splitlines()[1:3]
    assert (
        headlines[0].startswith("  rank 0 is in ")
        and headlines[1] == f"  rank 1 is in train_step (job.py:{SLEEP_LINE})"
    )
    dumps = {path.name: path.read_text() for path in sorted(Path(stall["stacks"]).iterdir())}
    assert sorted(dumps) == ["rank0.txt", "rank1.txt"]
    assert f'job.py", line {SLEEP_LINE} in train_step' in dumps["rank1.txt"], dumps["rank1.txt"]
    assert "in backward" in dumps["rank0.txt"] and "step_runner.py" in dumps["rank0.txt"], (
        "rank 0 waits in its backward's all-reduce"
    )
    assert "time.sleep" not in dumps["rank0.txt"] and f"line {SLEEP_LINE} in train_step" not in dumps["rank0.txt"]

    lifecycle.request_stop(grace=2.0)
    lifecycle.wait()
    outcome = lifecycle.end()
    assert outcome.status == RunStatus.STOPPED
    run = store.get(lifecycle.run_id)
    assert (run.status, run.stalled) == (RunStatus.STOPPED, False)
    assert_no_processes(lifecycle.run_id)


def test_py_spy_adds_the_native_frames_where_it_is_installed(stalling_run, monkeypatch):
    """py-spy is an optional extra (``pip install py-spy``; in the test extras, so ``make test``
    has it); where it runs, each rank's dump ends with its ``dump --native`` view."""
    import os

    spy = program("py-spy", "pip install 'jiyu_magics[stacks]'; make setup installs it with the test extras")
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(spy), os.environ["PATH"]]))
    lifecycle = stalling_run
    assert lifecycle.start()
    stall = follow_until(
        lifecycle,
        lambda: [e for e in read_events(lifecycle.files.events)[0] if e["kind"] == "stall"],
        120,
        "the stall event",
    )[0]
    rank1 = (Path(stall["stacks"]) / "rank1.txt").read_text()
    native = rank1.split("--- py-spy dump --native (exit 0) ---")[1]
    assert "train_step (job.py" in native and "sleep" in native, native


def test_jiyu_stacks_of_a_run_that_never_stalled_is_one_line_and_exit_code_2():
    run = RunStore().create(RunKind.JOB, "calm")
    done = jiyu("stacks", run.id)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip() == f"jiyu stacks: error: run {run.id} has no stack dump (one is taken when it stalls)"


def test_stall_text_says_how_long_the_step_stood_still():
    from jiyu_magics.views.run_table import stall_text

    assert [stall_text(0, now) for now in (42, 12 * 60 + 5, 2 * 3600 + 300)] == [
        "no step for 42 s",
        "no step for 12 min",
        "no step for 2 h 5 min",
    ]


def test_a_jobs_stall_timeout_is_the_default_of_its_fit_calls_and_jiyu_stop_ends_it(
    tmp_path, torchrun_tmp, no_schedulers
):
    """``jiyu submit --stall-timeout 3``: the detached supervisor flags the job, whose ``fit``
    sets no timeout of its own, and ``jiyu stop`` still ends the stalled run."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from .jobs_workload import finished

    path = tmp_path / "stalls.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(stall_script(timeout=None))]), path)
    submitted = jiyu("submit", str(path), "--nproc", "2", "--gpus", "0", "--stall-timeout", "3", "--name", "stuck-job")
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[2]
    wait_for(lambda: RunStore().get(run_id).stalled, 120, what="the job's stall flag")
    assert "running, stalled: no step for" in jiyu("jobs").stdout
    stall = wait_for(
        lambda: [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "stall"],
        30,
        what="the stall event, once the stacks are dumped",
    )[0]
    assert stall["timeout"] == 3.0 and sorted(p.name for p in Path(stall["stacks"]).iterdir()) == [
        "rank0.txt",
        "rank1.txt",
    ]
    stopped = jiyu("stop", run_id, "--grace", "2")
    assert stopped.returncode == 0, stopped.stderr
    assert finished(run_id, 60).status == RunStatus.STOPPED
    assert_no_processes(run_id)


@pytest.mark.parametrize("value, shown", [("-1", "-1.0"), ("nan", "nan"), ("inf", "inf")])
def test_a_bad_stall_timeout_is_one_line_and_exit_code_2(tmp_path, no_schedulers, value, shown):
    path = tmp_path / "any.ipynb"
    path.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    done = jiyu("submit", str(path), "--stall-timeout", value)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip() == f"jiyu submit: error: --stall-timeout {shown}: expected seconds >= 0 (0: off)"
    assert RunStore().list() == [], "nothing is created"
