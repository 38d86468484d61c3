"""The lease book and the usage report on a real SQLite run store and real processes (the queue's
rules without torchrun: who is next, what a lease may take, when it ends)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time

import pytest

from jiyu_magics.core.gpu.owners import Attribution
from jiyu_magics.core.gpu.snapshot import GpuDevice, GpuProcess, GpuSnapshot
from jiyu_magics.core.gpu.usage import accrue, report
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.store.leases import GpuSlot
from jiyu_magics.core.store.run_store import RunStore

from .server_fixtures import ended_run

SLOTS = [GpuSlot(f"GPU-{i}", i) for i in range(4)]


@pytest.fixture
def store(jiyu_home):
    return RunStore()


def waiting(store, gpus: int, **fields):
    pid = os.getpid()
    return store.create(
        "job", fields.pop("name", None), gpus_requested=gpus, pid=pid, pid_started=process_start_time(pid), **fields
    )


def test_first_in_line_first_served_and_priority_goes_ahead(store):
    first, second = waiting(store, 4), waiting(store, 1)
    urgent = waiting(store, 1, priority=2)
    assert [w.run_id for w in store.leases.queue()] == [urgent.id, first.id, second.id]
    assert store.leases.acquire(second.id, SLOTS) is None  # free GPUs, but not its turn
    assert [lease.index for lease in store.leases.acquire(urgent.id, SLOTS)] == [0]
    assert store.leases.acquire(first.id, SLOTS) is None  # 3 free of the 4 it wants
    assert store.leases.acquire(second.id, SLOTS) is None  # behind a bigger request: never overtakes it
    assert store.get(urgent.id).status == "starting" and store.get(first.id).queue_position == 1
    store.finish(urgent.id, "succeeded", 0)
    assert len(store.leases.acquire(first.id, SLOTS)) == 4


def test_to_top_moves_a_run_ahead_of_higher_priorities(store):
    a, b = waiting(store, 1, priority=3), waiting(store, 1)
    store.leases.to_top(b.id)
    assert [w.run_id for w in store.leases.queue()] == [b.id, a.id]
    with pytest.raises(ValueError, match="is not queued"):
        store.leases.to_top(ended_run().id)


def test_sharing_runs_share_only_with_each_other(store):
    one, two = waiting(store, 1, share=True), waiting(store, 2, share=True)
    assert [lease.index for lease in store.leases.acquire(one.id, SLOTS[:2])] == [0]
    assert [lease.index for lease in store.leases.acquire(two.id, SLOTS[:2])] == [1, 0]  # unleased first
    alone = waiting(store, 1)
    assert store.leases.acquire(alone.id, SLOTS[:2]) is None  # an exclusive lease never joins a shared GPU


def test_the_schema_refuses_a_second_exclusive_lease_on_a_gpu(store):
    run = waiting(store, 1)
    store.leases.acquire(run.id, SLOTS[:1])
    db = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO gpu_leases (uuid, gpu_index, run_id, host, since, shared) VALUES "
            "('GPU-0', 0, 'other', 'h', 1.0, 0)"
        )


def test_a_lease_ends_with_its_run_whatever_the_end(store):
    sleeper = subprocess.Popen(["sleep", "600"])
    lost = store.create("job", gpus_requested=1, pid=sleeper.pid, pid_started=process_start_time(sleeper.pid))
    store.leases.acquire(lost.id, SLOTS[:1])
    done = waiting(store, 1)
    store.leases.acquire(done.id, SLOTS[1:2])
    store.finish(done.id, "failed", 1, "rank 0: boom")
    sleeper.kill()
    sleeper.wait()
    assert store.record_lost(every=0) == [lost.id]
    assert [lease.run_id for lease in store.leases.live()] == []
    assert all(g["ended"] for run in (lost, done) for g in store.get(run.id).gpus)


def test_cpu_jobs_wait_for_a_slot_only_under_a_limit(store):
    a, b = waiting(store, 0), waiting(store, 0)
    assert store.leases.admit(a.id, 1) and not store.leases.admit(b.id, 1)
    store.finish(a.id, "succeeded", 0)
    assert store.leases.admit(b.id, 1)
    assert store.leases.admit(waiting(store, 0).id, None)  # no limit: at once


def device(uuid: str, util: int, processes=(), leases=()) -> GpuDevice:
    return GpuDevice(
        index=int(uuid[-1]),
        visible_index=0,
        name="x",
        uuid=uuid,
        gpu_util=util,
        processes=list(processes),
        leases=list(leases),
    )


def test_usage_credits_each_sampled_second_once_to_the_gpus_holders(store):
    run = waiting(store, 1, notebook="/lab/a.ipynb", name="a")
    (lease,) = store.leases.acquire(run.id, SLOTS[:1])
    kernel_proc = GpuProcess(
        pid=12,
        used_memory=2**30,
        command="ipykernel",
        type="compute",
        owner={"kernel_id": "k-1", "notebook": "b.ipynb"},
    )
    held = [{"run_id": run.id, "notebook": "/lab/a.ipynb"}]
    t0 = lease.since
    for now in (t0 + 1, t0 + 11, t0 + 11, t0 + 21):  # the same second twice (two samplers): counted once
        snap = GpuSnapshot(True, devices=[device("GPU-0", 2, leases=held), device("GPU-1", 50, [kernel_proc])])
        accrue(store.db, snap, now=now)
    store.finish(run.id, "succeeded", 0)
    rows = {r.key: r for r in report(store.db, since=t0 - 1, now=t0 + 21)}
    ran = rows[run.id]
    assert ran.idle_s == pytest.approx(20.0) and ran.runs == 1
    assert ran.gpu_s == pytest.approx(store.get(run.id).gpus[0]["ended"] - t0)
    assert (rows["kernel:k-1"].gpu_s, rows["kernel:k-1"].idle_s) == (pytest.approx(20.0), 0.0)  # 50% util: busy
    by_notebook = {r.key: r for r in report(store.db, since=t0 - 1, by="notebook", now=t0 + 21)}
    assert set(by_notebook) == {"/lab/a.ipynb", "b.ipynb"}
    with pytest.raises(ValueError, match="--by 'week'"):
        report(store.db, since=0, by="week")


def test_a_gap_without_samples_is_not_counted_as_idle(store):
    run = waiting(store, 1)
    (lease,) = store.leases.acquire(run.id, SLOTS[:1])
    held = [{"run_id": run.id, "notebook": None}]
    for now in (lease.since, lease.since + 3600):  # nobody sampled for an hour
        accrue(store.db, GpuSnapshot(True, devices=[device("GPU-0", 0, leases=held)]), now=now)
    (row,) = report(store.db, since=lease.since - 1, now=lease.since + 3600)
    assert row.idle_s == 60.0 and row.gpu_s == pytest.approx(3600.0, abs=1.0)


def test_usage_by_day_splits_a_lease_at_midnight(store):
    run = waiting(store, 1)
    store.leases.acquire(run.id, SLOTS[:1])
    midnight = time.mktime(time.strptime("2026-11-20", "%Y-%m-%d"))
    with sqlite3.connect(store.path) as db:
        db.execute(
            "UPDATE gpu_leases SET since = ?, ended = ? WHERE run_id = ?", (midnight - 600, midnight + 1200, run.id)
        )
    days = report(store.db, since=midnight - 86400, by="day", now=midnight + 86400)
    assert [(d.key, round(d.gpu_s)) for d in days] == [("2026-11-19", 600), ("2026-11-20", 1200)]


def test_attribution_marks_foreign_memory_and_outside_pids():
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        procs = [
            GpuProcess(sleeper.pid, 3 * 2**30, "sleep 600", "compute"),
            GpuProcess(4_000_000_123, 2**30, None, "compute"),
        ]
        snap = GpuSnapshot(True, devices=[device("GPU-0", 0, procs)])
        Attribution([], []).apply(snap, threshold=2**30)
        kinds = [p.owner["kind"] for p in snap.devices[0].processes]
        assert kinds == ["other", "outside"] and snap.devices[0].foreign_memory == 4 * 2**30
        assert snap.devices[0].free is False
    finally:
        sleeper.kill()
        sleeper.wait()
