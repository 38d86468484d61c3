"""The store busy or lost under running jobs, for real: detached supervisors, torchrun, the
``jiyu`` CLI, and a second process holding SQLite's write lock or a stray ``rm`` of the store
files. Jobs go on; commands say who holds a busy store instead of advising a repair; a lost
store gets its runs back with their real state (issue 24, group 1)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import finished, processes_of, wait_for

pytestmark = pytest.mark.usefixtures("torchrun_tmp")

HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def sleeper(path: Path, seconds: float) -> Path:
    """A job notebook that only waits (no torch in the ranks: two cores are shared)."""
    code = f"import time\nfor _ in range({int(seconds * 10)}):\n    time.sleep(0.1)\nprint('slept')"
    nbformat.write(new_notebook(cells=[new_code_cell(code)]), path)
    return path


def submit(notebook: Path, name: str) -> str:
    done = jiyu("submit", str(notebook), "--name", name)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]


def statuses() -> dict[str, str]:
    done = jiyu("jobs", "--all", "--json")
    assert done.returncode == 0, done.stderr
    return {run["name"]: run["status"] for run in json.loads(done.stdout)}


def test_a_busy_store_names_its_holder_and_a_queued_job_waits_it_out(tmp_path, monkeypatch):
    """Another process holds the write lock 5x the busy timeout (as 40-45 s would hold the
    default 30 s): a submit exits 75 naming the holder, no repair advised; the queued job,
    whose owner writes to the store while it waits, starts once its turn comes."""
    monkeypatch.setenv("JIYU_STORE_BUSY_S", "2")
    monkeypatch.setenv("JIYU_MAX_CPU_JOBS", "1")
    first = submit(sleeper(tmp_path / "first.ipynb", 12), "first")
    queued = submit(sleeper(tmp_path / "queued.ipynb", 1), "queued")
    wait_for(lambda: statuses() == {"first": "running", "queued": "queued"}, 90, what="one job running, one queued")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store_path()), "10"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        listing = jiyu("jobs")  # a reader is never held up by a writer (WAL)
        assert listing.returncode == 0 and "queued" in listing.stdout, listing.stderr
        refused = jiyu("submit", str(sleeper(tmp_path / "late.ipynb", 1)), "--name", "late")
    finally:
        holder.wait(timeout=30)
    assert refused.returncode == 75, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("jiyu submit: error: the store is busy: ") and f"PID {holder.pid} (" in line
    assert "repair" not in refused.stderr and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[0].endswith("waiting up to 2 s"), "the wait is said before it ends"
    assert finished(queued).status == "succeeded"
    assert finished(first).status == "succeeded"
    assert "late" not in statuses(), "the refused submit created nothing"


def test_a_deleted_store_ends_no_job_and_gets_its_runs_back_as_they_are(tmp_path, monkeypatch):
    """`rm jiyu.sqlite*` while two jobs run and one waits: the ranks go on, `jiyu store repair`
    (or any command) brings the store back, the supervisors register their runs again with
    their real state, the waiting one starts only when a place frees, and all three succeed."""
    monkeypatch.setenv("JIYU_MAX_CPU_JOBS", "2")
    ids = {name: submit(sleeper(tmp_path / f"{name}.ipynb", 20 if name != "waits" else 1), name) for name in "ab"}
    ids["waits"] = submit(sleeper(tmp_path / "waits.ipynb", 1), "waits")
    running = {"a": "running", "b": "running", "waits": "queued"}
    wait_for(lambda: statuses() == running, 90, what="two jobs running, one queued")
    ranks = {name: set(processes_of(ids[name])) for name in "ab"}
    assert all(ranks.values())
    path = store_path()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    time.sleep(8)  # before the fix every supervisor had killed its ranks by now (6 s)
    for name in "ab":
        assert all(psutil.pid_exists(pid) for pid in ranks[name]), f"the ranks of {name} were ended"
    repaired = jiyu("store", "repair")
    assert repaired.returncode == 0, repaired.stderr
    wait_for(lambda: statuses() == running, 30, what="the runs registered again as they are")
    store = RunStore()
    assert all(store.get(ids[name]).pid in processes_of(ids[name]) for name in "ab"), "running with their pid"
    ended = {name: finished(ids[name]) for name in ids}
    assert {name: run.status for name, run in ended.items()} == dict.fromkeys(ids, "succeeded")
    assert ended["waits"].started >= min(ended["a"].ended, ended["b"].ended) - 1, "the CPU job limit held"
    log = RunFiles.of(ids["a"]).log.read_text()
    assert "the store is out" in log and "the run is registered again as running" in log, log
    assert "Traceback" not in log


def test_a_job_that_ends_while_the_store_is_corrupt_keeps_its_end_for_repair(tmp_path):
    """The store file overwritten while a job runs: the job ends as it would, its supervisor
    keeps the end in the run folder, and `jiyu store repair` (setting the broken file aside)
    restores the run succeeded; the supervisor then finds it there and exits."""
    run_id = submit(sleeper(tmp_path / "short.ipynb", 6), "short")
    wait_for(lambda: statuses() == {"short": "running"}, 90, what="the job running")
    path = store_path()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database " * 200)
    log = RunFiles.of(run_id).log
    wait_for(lambda: "job succeeded" in log.read_text(), 90, what="the job's end in its log")
    wait_for(lambda: '"succeeded"' in (RunFiles.of(run_id).root / "run.json").read_text(), 30, what="run.json")
    repaired = jiyu("store", "repair")
    assert repaired.returncode == 0 and "Set the broken store aside" in repaired.stdout, repaired.stdout
    assert statuses() == {"short": "succeeded"}
    wait_for(lambda: not processes_of(run_id), 30, what="the supervisor to exit")
    assert "the store is out" in log.read_text() and "Traceback" not in log.read_text()
