"""The one stored run state machine (``core.runs.states``, written only by
``core.store.transitions.move``): every move allowed and refused, two writers racing for the end,
and reads that write nothing while a dead run shows ``lost`` — through the store, the CLI, the
REST API and a Prometheus scrape on real SQLite, real processes and a real Jupyter server."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from jiyu_magics.core.events.log import EventLog, read_events
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.runs import states
from jiyu_magics.core.runs.files import RunFiles, jiyu_home, store_path
from jiyu_magics.core.runs.model import RunStatus
from jiyu_magics.core.runs.states import TRANSITIONS, TransitionRefused
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .conftest import ROOT
from .server_fixtures import server_config

S = RunStatus
# a path of allowed moves that brings a new run to each state
PATHS = {
    S.QUEUED: [],
    S.STARTING: [S.STARTING],
    S.RUNNING: [S.STARTING, S.RUNNING],
    S.STOPPING: [S.STARTING, S.RUNNING, S.STOPPING],
    S.SUCCEEDED: [S.STARTING, S.RUNNING, S.SUCCEEDED],
    S.FAILED: [S.STARTING, S.FAILED],
    S.STOPPED: [S.STOPPED],
    S.LOST: [S.LOST],
}


@pytest.fixture
def store(jiyu_home):
    return RunStore()


def run_in(store: RunStore, state: RunStatus) -> str:
    run = store.create("job", "states", pid=os.getpid(), pid_started=process_start_time(os.getpid()))
    current = S.QUEUED
    for step in PATHS[state]:
        store.transition(run.id, {current}, step, "on the way")
        current = step
    assert store.stored(run.id).status is state
    return run.id


def test_every_state_has_its_moves_and_the_final_ones_have_none_but_lost():
    assert set(TRANSITIONS) == set(RunStatus)
    assert states.ACTIVE | states.FINAL == set(RunStatus) and not states.ACTIVE & states.FINAL
    assert all(not TRANSITIONS[s] for s in (S.SUCCEEDED, S.FAILED, S.STOPPED))
    assert TRANSITIONS[S.LOST] == states.ENDS  # its owner's late word only
    assert all(s not in TRANSITIONS[s] for s in RunStatus)  # staying put is no move


@pytest.mark.parametrize("source, target", list(itertools.product(RunStatus, RunStatus)))
def test_each_move_is_made_or_refused_as_the_table_says(store, source, target):
    run_id = run_in(store, source)
    history = store.history(run_id)
    if target in TRANSITIONS[source]:
        moved = store.transition(run_id, {source}, target, "the table allows it")
        assert moved.status is target and store.history(run_id)[-1] == (source, target, "the table allows it")
        assert (moved.ended is not None) is target.final
    else:
        with pytest.raises(TransitionRefused, match=f"is {source}: it cannot become {target}"):
            store.transition(run_id, {source}, target, "the table refuses it")
        assert store.stored(run_id).status is source and store.history(run_id) == history


def test_a_writer_that_expects_another_state_is_refused(store):
    run_id = run_in(store, S.RUNNING)
    with pytest.raises(TransitionRefused) as refused:
        store.transition(run_id, {S.QUEUED}, S.STARTING, "a lease for a run that already runs")
    assert (refused.value.current, refused.value.target) == (S.RUNNING, S.STARTING)
    assert store.stored(run_id).status is S.RUNNING


@pytest.mark.parametrize("state", list(RunStatus))
def test_a_restored_run_arrives_in_its_recorded_state_and_never_over_a_row(store, state):
    """Restoring (``jiyu store repair``, an owner after a store outage) is a named arrival: in
    any state its record says, noted with its reason, and refused onto a row the store has."""
    run_id = run_in(store, state)
    record = store.stored(run_id)
    with store.db.write() as db:
        db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        db.execute("DELETE FROM transitions WHERE run_id = ?", (run_id,))
    assert store.restore([record], "the record came back") == 1
    assert store.stored(run_id) == record and store.history(run_id) == [(None, state, "the record came back")]
    assert store.restore([replace(record, name="stale")], "a stale record") == 0
    assert store.stored(run_id).name == "states" and len(store.history(run_id)) == 1
    with pytest.raises(TransitionRefused, match=f"is {state}: it cannot become {state}"):
        states.check_arrival(run_id, state, "restored", state, "over a row")


def test_a_run_is_born_only_queued_or_running_and_a_derived_status_is_never_restored(store):
    for state in set(RunStatus) - states.BORN:
        with pytest.raises(TransitionRefused, match=f"not in the store: it cannot become {state} .born"):
            states.check_arrival("feedbeef", None, "born", state, "a launcher")
    with pytest.raises(ValueError, match="cannot be born"):
        store.create("job", "lost-born", status=S.LOST)
    pid, started = dead_process()
    run = store.create(
        "job", "dead", status=S.RUNNING, pid=pid, pid_started=started, owner_pid=pid, owner_started=started
    )
    record, shown = store.stored(run.id), store.get(run.id)
    assert (shown.status, shown.derived) == (S.LOST, True)
    with store.db.write() as db:
        db.execute("DELETE FROM runs WHERE id = ?", (run.id,))
    with pytest.raises(ValueError, match="derived status"):
        store.restore([shown], "a listing's view")
    assert store.restore([record], "its record") == 1 and store.stored(run.id).status is S.RUNNING


def test_an_end_ends_the_leases_in_the_same_transaction(store):
    from jiyu_magics.core.store.leases import GpuSlot

    run = store.create("job", "leased", gpus_requested=1, pid=os.getpid(), pid_started=process_start_time(os.getpid()))
    assert store.leases.acquire(run.id, [GpuSlot("GPU-0", 0)])
    assert store.stored(run.id).status is S.STARTING  # the lease and the move, one transaction
    store.mark_running(run.id, pid=os.getpid())
    store.finish(run.id, S.SUCCEEDED, exit_code=0)
    assert [lease.ended is not None for lease in store.leases.of_runs([run.id])[run.id]] == [True]
    assert store.leases.live() == []


RACER = textwrap.dedent(
    """
    import sys, time
    from jiyu_magics.core.events.log import EventLog
    from jiyu_magics.core.runs.files import RunFiles
    from jiyu_magics.core.runs.states import TransitionRefused
    from jiyu_magics.core.store.run_store import RunStore

    status, start, runs = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    store = RunStore()
    for index, run_id in enumerate(runs):
        while time.time() < start + index * 0.05:
            pass
        def close(run_id=run_id):
            with EventLog(RunFiles.of(run_id).events) as log:
                log.append("end", status=status, source="racer")
        try:
            store.finish(run_id, status, then=close)
            print("won", run_id, flush=True)
        except TransitionRefused as refused:
            print("refused", run_id, refused, flush=True)
    """
)


def test_two_writers_racing_for_the_end_one_wins_the_other_is_refused_and_log_and_row_agree(store, tmp_path):
    runs = [run_in(store, S.RUNNING) for _ in range(25)]
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    start = time.time() + 2.0  # both processes are up by then
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    racers = [
        subprocess.Popen(
            [sys.executable, str(script), status, str(start), *runs], stdout=subprocess.PIPE, text=True, env=env
        )
        for status in ("succeeded", "failed")
    ]
    outputs = [racer.communicate(timeout=120)[0].splitlines() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    said = {
        (line.split()[0], line.split()[1], status)
        for status, lines in zip(("succeeded", "failed"), outputs, strict=True)
        for line in lines
    }
    for run_id in runs:
        verdicts = {(verdict, status) for verdict, rid, status in said if rid == run_id}
        (winner,) = [status for verdict, status in verdicts if verdict == "won"]
        (loser,) = [status for verdict, status in verdicts if verdict == "refused"]
        assert {winner, loser} == {"succeeded", "failed"}
        ends = [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "end"]
        assert [e["status"] for e in ends] == [winner] == [store.stored(run_id).status.value]
        assert store.history(run_id)[-1][1] == winner
    refusals = [line for lines in outputs for line in lines if line.startswith("refused")]
    assert len(refusals) == len(runs) and all("it cannot become" in line for line in refusals)


# -- reads write nothing -----------------------------------------------------------------------


def dead_process() -> tuple[int, float]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = process_start_time(child.pid)
    child.kill()
    child.wait()
    return child.pid, started


def stored_state_digest(home: Path) -> dict[str, str]:
    """Every byte the store and the run folders hold (the SQLite file and its write-ahead log;
    the ``-shm`` wal-index is shared memory readers must touch, not stored state)."""
    digests = {}
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.name.endswith("-shm"):
            digests[str(path.relative_to(home))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


@pytest.fixture
def jp_server_config():
    return server_config(usage_sample_interval=0)  # the background upkeep (a writer) is off: requests only


def killed_runs(store: RunStore) -> dict[str, str]:
    """A job whose supervisor and torchrun were killed while running, one killed while queued,
    one that ended, with event logs and stdout logs on disk."""
    ids = {}
    for name, status in (("killed-running", S.RUNNING), ("killed-queued", S.QUEUED)):
        pid, started = dead_process()
        run = store.create("job", name, pid=pid, pid_started=started, owner_pid=pid, owner_started=started)
        if status is S.RUNNING:
            store.transition(run.id, {S.QUEUED}, S.STARTING, "test")
            store.transition(run.id, {S.STARTING}, S.RUNNING, "test")
        files = RunFiles.of(run.id).create()
        with EventLog(files.events) as log:
            log.append("start", total_steps=10)
            log.append("step", step=3, loss=0.5)
        files.log.write_text("[rank0]: step 3\n")
        ids[name] = run.id
    done = store.create("job", "ended", status=S.RUNNING, pid=os.getpid())
    store.finish(done.id, S.SUCCEEDED, exit_code=0)
    ids["ended"] = done.id
    return ids


async def test_listings_lookups_rest_and_scrapes_write_nothing_and_show_a_dead_run_lost(jp_fetch, store):
    ids = killed_runs(store)
    home = jiyu_home()
    with sqlite3.connect(store_path()) as db:  # what readers see is in the file itself, not pending in the log
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = stored_state_digest(home)

    listing = jiyu("jobs", "--all", "--json")
    assert listing.returncode == 0, listing.stderr
    shown = {run["id"]: run["status"] for run in json.loads(listing.stdout)}
    assert shown == {ids["killed-running"]: "lost", ids["killed-queued"]: "lost", ids["ended"]: "succeeded"}
    assert jiyu("jobs", "--all").returncode == 0 and jiyu("queue").returncode == 0
    assert "lost" in jiyu("logs", ids["killed-running"]).stdout + jiyu("jobs", "--all").stdout
    runs = json.loads((await jp_fetch("jiyu", "api", "runs")).body)["runs"]
    assert {run["id"]: run["status"] for run in runs} == shown
    one = json.loads((await jp_fetch("jiyu", "api", "runs", ids["killed-running"])).body)
    assert one["status"] == "lost"
    await jp_fetch("jiyu", "api", "runs", ids["killed-running"], "events")
    await jp_fetch("jiyu", "api", "runs", ids["killed-running"], "log")
    await jp_fetch("jiyu", "api", "gpus")
    scrape = (await jp_fetch("jiyu", "metrics")).body.decode()
    assert 'jiyu_runs{status="lost"} 2.0' in scrape

    assert stored_state_digest(home) == before
    assert store.stored(ids["killed-running"]).status is S.RUNNING  # still as stored: nobody wrote

    assert sorted(store.record_lost(every=0)) == sorted([ids["killed-running"], ids["killed-queued"]])
    assert stored_state_digest(home) != before  # the explicit step is the writer
    ends = [e for e in read_events(RunFiles.of(ids["killed-running"]).events)[0] if e["kind"] == "end"]
    assert [e["status"] for e in ends] == ["lost"]
