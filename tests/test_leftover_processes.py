"""A process a job's notebook started (``subprocess.Popen(['sleep', '300'])``) outlives the
job's ranks and supervisor (issue 24, group 3): it carries the run id, but it is a leftover, not
the run. The run is lost once its ranks and owner are gone, its GPUs go to the next run, the
listing names the leftover, and ``jiyu stop`` ends it. Real supervisor, torchrun and SQLite;
two GPUs from the NVML double (this machine has none)."""

from __future__ import annotations

import os
import signal

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics import jobs
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import processes_of, wait_for

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

HELPER_CELL = """\
import subprocess, sys, time
if int(__import__('os').environ.get('RANK', '0')) == 0:
    helper = subprocess.Popen(['sleep', '300'])
    print(f'helper {helper.pid}', flush=True)
for _ in range(600):
    time.sleep(0.5)
"""


def helper_notebook(path):
    nbformat.write(new_notebook(cells=[new_code_cell(HELPER_CELL)]), path)
    return path


def test_a_helper_process_does_not_keep_a_dead_runs_gpus(tmp_path, nvml_double):
    held = jobs.submit(helper_notebook(tmp_path / "helper.ipynb"), nproc=1, gpus=2)
    waiting = jobs.submit(helper_notebook(tmp_path / "next.ipynb"), nproc=1, gpus=2)
    wait_for(lambda: RunStore().get(held.id).status == "running", what="the first run to start")
    helper = wait_for(lambda: _helper_of(held.id), 60, what="the helper process")
    assert RunStore().get(waiting.id).status == "queued"
    os.kill(RunStore().get(held.id).pid, signal.SIGKILL)  # its supervisor: torchrun and the rank follow
    try:
        lost = wait_for(lambda: (lambda r: r if r.status == "lost" else None)(RunStore().get(held.id)), 60, what="lost")
        assert lost.status == "lost" and psutil.pid_exists(helper), "the helper lives on: a leftover"
        assert processes_of(held.id) == [helper]
        started = wait_for(
            lambda: RunStore().get(waiting.id).status == "running", 60, what="the next run to get the GPUs"
        )
        assert started
        listing = jiyu("jobs", "--all")
        line = next(row for row in listing.stdout.splitlines() if row.startswith(held.id))
        assert f"1 leftover process ({helper} sleep)" in line, listing.stdout
        shown = jiyu("show", held.id)
        assert f"1 leftover process ({helper} sleep) still carry its id; jiyu stop" in shown.stdout, shown.stdout
        stopped = jiyu("stop", held.id, "--grace", "2")
        assert stopped.returncode == 0, stopped.stderr
        assert f"still carrying its id was running: stopped ({helper})" in stopped.stdout, stopped.stdout
        wait_for(lambda: not psutil.pid_exists(helper) or psutil.Process(helper).status() == "zombie", 15)
        assert RunStore().get(held.id).status == "lost"
    finally:
        jobs.stop(waiting.id, grace=2)
        for pid in processes_of(held.id):
            os.kill(pid, signal.SIGKILL)


def _helper_of(run_id: str) -> int | None:
    """The sleep the rank started, found in the process table (not through the code under test)."""
    for pid in processes_of(run_id):
        try:
            if psutil.Process(pid).name() == "sleep":
                return pid
        except psutil.Error:
            continue
    return None
