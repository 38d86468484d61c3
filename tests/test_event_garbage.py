"""Lines in a run's ``events.jsonl`` that are not events (a torn write from a killed rank, a
line someone appended by hand) are skipped and counted by every reader: ``jiyu jobs``, the
REST routes and ``/metrics`` keep answering, with the progress the real events give."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jiyu_magics.core.events.log import EventLog, read_events, summarize, tail_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import EventKind

from .cli_runner import jiyu
from .server_fixtures import body, live_run, server_config, training_events

GARBAGE = [
    b"42",
    b"[1, 2]",
    b'"x"',
    b"null",
    b'{"kind": "nope"}',
    b'{"kind": "step", "step": "x", "loss": "low"}',
    b'{"t": "yesterday", "kind": "val"}',
    b'{"t": 9.5, "kind": "st',
]  # the last one torn by a killed writer


@pytest.fixture
def jp_server_config():
    return server_config()


def spoil(files: RunFiles, lines: list[bytes] = GARBAGE) -> None:
    """Appends ``lines`` to a real run's log, then one more real step: the readers must go on
    past them."""
    with open(files.events, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    with EventLog(files.events) as log:
        log.append("step", step=6, epoch=1, loss=0.25, lr=1e-3, samples_per_s=600.0)


def spoiled_run(name: str = "spoiled"):
    run = live_run(name)
    spoil(training_events(run, steps=5, total=20))
    return run


def only_events(events: list) -> bool:
    return all(isinstance(e, dict) and e.get("kind") in EventKind.values() for e in events)


# -- the readers in core --------------------------------------------------------------------


@pytest.mark.parametrize("line", GARBAGE, ids=lambda line: line.decode())
def test_every_reader_skips_and_counts_a_line_that_is_not_an_event(line):
    files = training_events(live_run(), steps=5, total=20)
    spoil(files, [line])
    events, offset = read_events(files.events)
    assert only_events(events) and len(events) == 8 and events.skipped == 1
    assert offset == files.events.stat().st_size
    tail = tail_events(files.events)
    assert only_events(tail) and tail.skipped == 1
    summary = summarize(files.events)
    assert (summary["step"], summary["loss"], summary["progress"]) == (6, 0.25, 0.3)


# -- the entry points -----------------------------------------------------------------------


def test_jiyu_jobs_lists_a_run_whose_log_holds_garbage():
    run = spoiled_run()
    table = jiyu("jobs")
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    assert run.id in table.stdout and "6/20" in table.stdout
    listing = json.loads(jiyu("jobs", "--all", "--json").stdout)
    assert [(r["id"], r["display"]["progress"], r["display"]["loss"]) for r in listing] == [(run.id, "6/20", "0.25")]


async def test_rest_runs_answer_for_a_run_whose_log_holds_garbage(jp_fetch):
    run = spoiled_run()
    (listed,) = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    one = body(await jp_fetch("jiyu", "api", "runs", run.id))
    for record in (listed, one):
        summary = record["summary"]
        assert (record["id"], summary["step"], summary["progress"], summary["loss"]) == (run.id, 6, 0.3, 0.25)
        assert summary["losses"][-1] == 0.25 and summary["val_acc"] == 0.71
    events = body(await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": "0"}))["events"]
    assert only_events(events) and [e["kind"] for e in events] == ["start"] + ["step"] * 5 + ["val", "step"]


async def test_metrics_answer_for_a_run_whose_log_holds_garbage(jp_fetch):
    run = spoiled_run("scraped")
    text = (await jp_fetch("jiyu", "metrics")).body.decode()
    steps = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "jiyu_run_step" and s.labels["run_id"] == run.id
    ]
    assert [s.value for s in steps] == [6]
