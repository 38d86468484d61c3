"""Stall diagnosis that does not mislead (issue 24, group 8), each through its real entry point
on real 2-rank gloo torchrun runs: a rank stopped with SIGSTOP is shown stopped (process state
T), not "outside Python"."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import assert_no_processes, finished, wait_for
from .stall_workload import stall_script

SLEEP = "time.sleep(600)  # rank 1 stalls here, before the all-reduce of its backward"


def submitted(tmp_path: Path, source: str, *options: str) -> str:
    path = tmp_path / "job.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), path)
    done = jiyu("submit", str(path), "--nproc", "2", "--gpus", "0", *options)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]


def stall_event(run_id: str) -> dict:
    return wait_for(
        lambda: [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "stall"],
        120,
        what="the stall event",
    )[0]


def test_a_rank_stopped_with_sigstop_is_shown_stopped_not_outside_python(tmp_path, torchrun_tmp, no_schedulers):
    source = stall_script(timeout=None).replace(SLEEP, "os.kill(os.getpid(), __import__('signal').SIGSTOP)")
    run_id = submitted(tmp_path, source, "--stall-timeout", "3", "--name", "sigstopped")
    try:
        stall_event(run_id)
        stacks = jiyu("stacks", run_id)
        assert stacks.returncode == 0, stacks.stderr
        assert "  rank 1 is stopped (process state T, by SIGSTOP or Ctrl-Z)" in stacks.stdout, stacks.stdout
        assert "outside Python" not in stacks.stdout and "  rank 0 is in " in stacks.stdout, stacks.stdout
    finally:
        stopped = jiyu("stop", run_id, "--grace", "2")
    assert stopped.returncode == 0, stopped.stderr
    assert finished(run_id, 60).status in ("stopped", "failed")
    assert RunStore().get(run_id).stalled is False
    assert_no_processes(run_id)
