"""The SQLite run store, on real SQLite files and real processes."""

import subprocess
import sys
import time

import pytest

from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.runs.model import RunStatus
from jiyu_magics.core.runs.states import TransitionRefused, ended_as
from jiyu_magics.core.store.database import SCHEMA_VERSION
from jiyu_magics.core.store.run_row import UnknownRun
from jiyu_magics.core.store.run_store import RunStore


@pytest.fixture
def store(jiyu_home):
    return RunStore()


def test_create_get_update_finish(store):
    run = store.create("job", "nightly", nproc=2, notebook="nb.ipynb", params={"lr": 0.1})
    assert run.status == "queued" and len(run.id) == 8
    got = store.get(run.id)
    assert (got.name, got.nproc, got.params) == ("nightly", 2, {"lr": 0.1})
    store.mark_running(run.id, pid=subprocess.os.getpid())
    assert store.get(run.id).status == "running" and store.get(run.id).started
    done = store.finish(run.id, "succeeded", exit_code=0)
    assert done.status == "succeeded" and done.ended >= done.started and done.duration >= 0


def test_first_final_status_wins(store):
    run = store.create("job", status="running", pid=subprocess.os.getpid(), pid_started=None)
    store.finish(run.id, "failed", exit_code=1, error="boom")
    with pytest.raises(TransitionRefused, match="is failed: it cannot become succeeded"):
        store.finish(run.id, "succeeded")
    assert (store.get(run.id).status, store.get(run.id).error) == ("failed", "boom")


def test_a_stop_request_turns_a_running_run_stopping_and_a_failure_after_it_is_stopped(store):
    run = store.create("job", status="running", pid=subprocess.os.getpid())
    assert store.request_stop(run.id).status == "stopping"
    said = ended_as(RunStatus.FAILED, store.get(run.id).stop_requested)  # the one stop rule
    assert store.finish(run.id, said, exit_code=-15).status == "stopped"
    queued = store.create("job", pid=subprocess.os.getpid())
    assert store.request_stop(queued.id).status == "queued"  # its owner ends it: nothing started


def test_resolve_by_unique_prefix(store):
    a = store.create("kernel")
    assert store.resolve(a.id[:4]).id == a.id
    with pytest.raises(UnknownRun, match="no run with id 'zz'"):
        store.resolve("zz")
    with pytest.raises(UnknownRun):
        store.resolve("")


def test_a_dead_process_makes_its_run_lost(store):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    run = store.create("job", status="running")
    store.mark_running(run.id, pid=child.pid)
    assert store.list(include_finished=False)[0].status == "running"
    child.kill()
    child.wait()
    assert store.stored(run.id).status == "running"  # nothing recorded: reading writes nothing
    listed = {r.id: r for r in store.list()}
    assert listed[run.id].status == "lost" and "ended without reporting" in listed[run.id].error
    assert listed[run.id].derived and store.get(run.id).status == "lost"
    assert store.stored(run.id).status == "running"
    assert store.record_lost(every=0) == [run.id]  # a run owner's upkeep records it
    stored = store.stored(run.id)
    assert (stored.status, stored.derived) == ("lost", False)
    assert store.history(run.id)[-1] == ("running", "lost", "its processes are gone")


def ended_process() -> tuple[int, float]:
    """The pid and start time of a process that has exited (as torchrun has, for a moment,
    before the kernel owning its ``%%train --nproc`` records the end)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = process_start_time(child.pid)
    child.kill()
    child.wait()
    return child.pid, started


def test_a_run_stays_running_while_its_owner_lives_after_its_recorded_process_ended(store):
    """A kernel owns its ``%%train --nproc`` run, whose recorded pid is torchrun's: between
    torchrun's exit and the kernel recording the end, listings, lookups and status counts (a
    Prometheus scrape, the panel) must not mark it lost. Once the owner is gone too, it is."""
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        torchrun, torchrun_started = ended_process()
        run = store.create(
            "ddp",
            "owned",
            status="running",
            pid=torchrun,
            pid_started=torchrun_started,
            owner_pid=kernel.pid,
            owner_started=process_start_time(kernel.pid),
        )
        assert store.record_lost(every=0) == []
        assert store.list()[0].status == "running" and store.resolve(run.id).status == "running"
        assert store.count_by_status() == {"running": 1}
        assert RunStore(store.path).get(run.id).owner_pid == kernel.pid  # the column, read back
        kernel.kill()
        kernel.wait()
        listed = store.list()[0]
        assert (listed.status, listed.error) == ("lost", "its process ended without reporting")
        assert store.count_by_status() == {"lost": 1}
    finally:
        kernel.kill()
        kernel.wait()


def test_a_recycled_owner_pid_keeps_no_run_alive(store):
    torchrun, torchrun_started = ended_process()
    store.create(
        "ddp",
        status="running",
        pid=torchrun,
        pid_started=torchrun_started,
        owner_pid=subprocess.os.getpid(),
        owner_started=time.time() - 3600,
    )
    assert store.list()[0].status == "lost"


def test_recycled_pid_is_not_mistaken_for_the_run(store):
    run = store.create("job", status="running", pid=subprocess.os.getpid(), pid_started=time.time() - 3600)
    assert store.list()[0].status == "lost"
    assert run.id == store.list()[0].id


def test_list_orders_newest_first_and_filters_active(store):
    old = store.create("kernel", status="running")
    store.finish(old.id, "succeeded")
    new = store.create("kernel", status="running", pid=subprocess.os.getpid())
    store.update(new.id, pid_started=None)
    assert [r.id for r in store.list()] == [new.id, old.id]
    assert [r.id for r in store.list(include_finished=False)] == [new.id]


def test_bad_fields_are_rejected(store):
    with pytest.raises(ValueError, match="unknown run kind"):
        store.create("cronjob")
    with pytest.raises(ValueError, match="a run cannot be born 'succeeded'"):
        store.create("job", status="succeeded")
    run = store.create("job")
    with pytest.raises(ValueError, match="only through RunStore.transition"):
        store.update(run.id, status="failed")
    with pytest.raises(UnknownRun):
        store.update("deadbeef", name="x")
    with pytest.raises(UnknownRun):
        store.transition("deadbeef", {RunStatus.QUEUED}, RunStatus.STARTING, "test")


def test_a_stop_request_carries_its_grace(store):
    run = store.create("job", status="running", pid=subprocess.os.getpid())
    assert store.request_stop(run.id, 42.5).stop_grace == 42.5 and store.get(run.id).stop_requested


def test_a_version_1_store_is_migrated_in_place(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, "
        "nproc INTEGER NOT NULL DEFAULT 1, nnodes INTEGER NOT NULL DEFAULT 1, notebook TEXT, cwd TEXT, "
        "host TEXT NOT NULL, backend TEXT NOT NULL DEFAULT 'local', params TEXT NOT NULL DEFAULT '{}', "
        "pid INTEGER, pid_started REAL, pgid INTEGER, created REAL NOT NULL, started REAL, ended REAL, "
        "exit_code INTEGER, error TEXT, stop_requested INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "INSERT INTO runs (id, name, kind, status, host, created) VALUES ('abcd1234', 'old', 'job', "
        "'succeeded', 'h', 1.0)"
    )
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    migrated = RunStore(path)
    old = migrated.get("abcd1234")
    assert old.stop_grace is None and old.name == "old"
    assert (old.scheduler_id, old.queue_reason, old.polled) == (None, None, None)
    assert (old.gpus_requested, old.priority) == (None, 0)
    assert old.gpus == []  # the lease table exists, empty
    assert old.stalled_since is None and not old.stalled
    assert (old.owner_pid, old.owner_started) == (None, None)
    assert old.preemptible is False
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
    assert migrated.history("abcd1234") == []  # the transitions table exists; the run predates it
