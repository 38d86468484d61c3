"""Listings that stay flat as history grows: a run's summary is stored once, when it ends, and
listings read it from the store (no event log), page with --limit/--since, and the REST list
carries params in short form. Real parts: the jiyu console script, a real jupyter_server (jp_fetch), a real
torchrun job, real SQLite. Speed itself is measured in benchmarks/listing_history.py."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest
from tornado.httpclient import HTTPClientError

from jiyu_magics import jobs
from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.run_upkeep import upkeep

from .cli_runner import jiyu
from .jobs_workload import finished, write_notebook
from .server_fixtures import body


def finished_run(name: str, steps: int = 8, total: int = 8, created: float | None = None):
    """A run with a real event log, ended through the store as every owner ends one."""
    store = RunStore()
    run = store.create("job", name, status="running")
    with EventLog(RunFiles.of(run.id).create().events) as log:
        log.append("start", total_steps=total, epochs=1, nproc=1)
        for step in range(1, steps + 1):
            log.append("step", step=step, epoch=0, loss=1.0 / step, lr=1e-3, samples_per_s=100.0)
        log.append("end", status="succeeded", step=steps, message="done")
    store.finish(run.id, "succeeded", exit_code=0)
    return store.update(run.id, created=created) if created else store.get(run.id)


def forget_event_logs(*runs) -> None:
    for run in runs:
        RunFiles.of(run.id).events.unlink()


@pytest.mark.usefixtures("torchrun_tmp")
def test_a_job_that_ended_is_listed_from_its_stored_summary_without_its_event_log(tmp_path):
    """Through the real lifecycle: a torchrun job ends, its summary is in the store; with the
    event log gone, `jiyu jobs --all` still shows its progress and last loss."""
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), nproc=1, params={"steps": 6})
    done = finished(run.id)
    assert done.status == "succeeded" and done.summary["step"] == 6 and done.summary["end_status"] == "succeeded"
    forget_event_logs(done)
    listed = jiyu("jobs", "--all")
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith(run.id))
    assert "6/6" in line and "succeeded" in line


def test_runs_ended_before_summaries_were_stored_get_theirs_at_the_next_upkeep():
    """A store migrated from schema 4 has finished runs without a summary: a listing folds the
    log in memory and writes nothing; the next upkeep (a run owner's) stores it once; later listings need no log."""
    old = finished_run("older", steps=5, total=10)
    with sqlite3.connect(store_path()) as db:
        db.execute("UPDATE runs SET summary = NULL")
    first = jiyu("jobs", "--all")
    assert "5/10" in first.stdout, first.stdout + first.stderr
    with sqlite3.connect(store_path()) as db:
        assert db.execute("SELECT summary FROM runs").fetchone() == (None,)
    upkeep()
    forget_event_logs(old)
    again = jiyu("jobs", "--all", "--json")
    (record,) = json.loads(again.stdout)
    assert (record["summary"]["step"], record["display"]["progress"]) == (5, "5/10")


def test_jobs_pages_with_limit_and_since():
    now = time.time()
    old = finished_run("last-month", created=now - 30 * 86400)
    middle = finished_run("yesterday", created=now - 86400)
    new = finished_run("just-now")
    newest = json.loads(jiyu("jobs", "--all", "--json", "--limit", "2").stdout)
    assert [r["id"] for r in newest] == [new.id, middle.id]
    recent = json.loads(jiyu("jobs", "--all", "--json", "--since", "2d").stdout)
    assert [r["id"] for r in recent] == [new.id, middle.id]
    dated = json.loads(
        jiyu("jobs", "--all", "--json", "--since", time.strftime("%Y-%m-%d", time.localtime(now - 40 * 86400))).stdout
    )
    assert [r["id"] for r in dated] == [new.id, middle.id, old.id]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--limit", "0"], "positive whole number"),
        (["--limit", "ten"], "positive whole number"),
        (["--since", "yesterday"], "a span such as 7d"),
    ],
)
def test_bad_paging_values_are_one_line_and_exit_code_2(args, words):
    result = jiyu("jobs", "--all", *args)
    assert result.returncode == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- REST ------------------------------------------------------------------------------------


async def fails(fetch_call) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await fetch_call
    return caught.value.code, json.loads(caught.value.response.body)


async def test_the_runs_list_pages_and_lists_params_in_short_form(jp_fetch):
    now = time.time()
    old = finished_run("old", created=now - 7200)
    RunStore().update(old.id, params={"lr": 0.1})
    new = finished_run("new")
    forget_event_logs(old, new)  # the list reads stored summaries only
    listed = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    assert [r["id"] for r in listed] == [new.id, old.id]
    # short values listed as they are (the panel shows which differ), a long one only by its size
    RunStore().update(new.id, params={"lr": 0.2, "notes": "x" * 500})
    listed = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    assert [r["params"] for r in listed] == [{"lr": 0.2, "notes": "<502 characters>"}, {"lr": 0.1}]
    assert listed[1]["summary"]["step"] == 8
    assert [r["id"] for r in body(await jp_fetch("jiyu", "api", "runs", params={"limit": "1"}))["runs"]] == [new.id]
    since = body(await jp_fetch("jiyu", "api", "runs", params={"since": str(now - 60)}))["runs"]
    assert [r["id"] for r in since] == [new.id]
    assert body(await jp_fetch("jiyu", "api", "runs", old.id))["params"] == {"lr": 0.1}


@pytest.mark.parametrize(
    "query, words",
    [
        ({"limit": "0"}, "'limit'"),
        ({"limit": "abc"}, "'limit'"),
        ({"limit": "9" * 5000}, "'limit'"),
        ({"since": "nan"}, "'since'"),
        ({"since": "-5"}, "'since'"),
        ({"since": "1e999"}, "'since'"),
    ],
)
async def test_bad_list_queries_are_400(jp_fetch, query, words):
    code, reply = await fails(jp_fetch("jiyu", "api", "runs", params=query))
    assert code == 400 and words in reply["message"]


@pytest.fixture
def notebook(jp_root_dir):
    path = write_notebook(jp_root_dir / "train.ipynb")
    return path.name


@pytest.mark.parametrize(
    "payload",
    [
        {"params": {"data": "x" * (65 * 1024)}},
        {"params": {"table": list(range(20_000))}},
        {"param_lines": ["data = '" + "x" * (65 * 1024) + "'"]},
    ],
)
async def test_a_parameter_over_64_kib_is_one_400_and_no_run(jp_fetch, notebook, payload):
    data = json.dumps({"notebook": notebook, **payload}).encode()
    code, reply = await fails(jp_fetch("jiyu", "api", "runs", method="POST", body=data))
    assert code == 400 and "larger than 64 KiB" in reply["message"]
    assert RunStore().list() == []


# -- %jobs ----------------------------------------------------------------------------------


def test_the_jobs_magic_pages_with_limit_and_since(ip, capsys):
    now = time.time()
    finished_run("last-week", created=now - 7 * 86400)
    newest = finished_run("newest")
    ip.run_line_magic("jobs", "--all --limit 1")
    shown = capsys.readouterr().out
    assert newest.id in shown and "last-week" not in shown and "8/8" in shown
    ip.run_line_magic("jobs", "--all --since 1d")
    assert "last-week" not in capsys.readouterr().out
    ip.run_line_magic("jobs", "--all --since 30d")
    assert "last-week" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, words", [("--all --since soon", "a span such as 7d"), ("--limit -3", "positive whole number")]
)
def test_bad_paging_values_in_the_jobs_magic_are_one_usage_error(ip, line, words):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=words):
        ip.run_line_magic("jobs", line)


def test_a_long_history_is_listed_a_page_at_a_time_and_says_what_it_left_out(ip, capsys):
    """`--all` shows the 100 newest finished runs (as quick at 5000 runs as at 50) and says how
    many it left out; --limit asks for more."""
    from jiyu_magics.core.store.run_row import Run, new_run_id

    store, now = RunStore(), time.time()
    store.restore(
        [
            Run(
                id=new_run_id(),
                name=f"old-{i}",
                kind="job",
                status="succeeded",
                host=store.host,
                created=now - 1000 + i,
                started=now - 1000 + i,
                ended=now - 999 + i,
                summary={"step": i},
            )
            for i in range(103)
        ],
        "a long history, written at once",
    )
    listed = jiyu("jobs", "--all")
    rows = [line for line in listed.stdout.splitlines() if " old-" in line]
    assert len(rows) == 100 and "old-102" in rows[0] and "old-3 " in rows[-1] + " "
    assert "The 100 newest of 103 runs; --limit N shows more" in listed.stdout
    everything = jiyu("jobs", "--all", "--limit", "200")
    assert (
        sum(" old-" in line for line in everything.stdout.splitlines()) == 103 and "newest of" not in everything.stdout
    )
    assert len(json.loads(jiyu("jobs", "--all", "--json").stdout)) == 100
    ip.run_line_magic("jobs", "--all --limit 5")
    assert "The 5 newest of 103 runs" in capsys.readouterr().out
