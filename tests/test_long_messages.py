"""A 300 KB exception message (issue 24, group 6): the event log keeps its head and tail in a
line of a few KB, the run row likewise, and a follower of the events route reads past an
over-long line (one an older jiyu wrote) to the run's end instead of standing still."""

from __future__ import annotations

import json

import pytest

from jiyu_magics.core.events.log import EventLog, read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .server_fixtures import server_config

HEAD, TAIL = "HEAD-OF-THE-MESSAGE ", " TAIL-SAYS-WHY"
LONG = HEAD + "x" * 300_000 + TAIL


@pytest.fixture
def jp_server_config():
    return server_config()


def test_a_300_kb_exception_message_is_logged_bounded_with_its_head_and_tail(ip):
    ip.user_ns["LONG"] = LONG
    ip.run_cell(
        "import torch\nmodel = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))]\n"
        "def train_step(model, batch):\n    raise RuntimeError(LONG)\n"
    )
    result = ip.run_cell("%train --max-steps 1 --no-ckpt")
    assert isinstance(result.error_in_exec, RuntimeError)
    run = RunStore().list()[0]
    lines = RunFiles.of(run.id).events.read_bytes().splitlines()
    assert max(map(len, lines)) < 20_000, "an event line must stay a few KB"
    error = next(e for e in read_events(RunFiles.of(run.id).events)[0] if e["kind"] == "error")
    assert error["message"].startswith("RuntimeError: " + HEAD) and error["message"].endswith(TAIL)
    assert "characters left out" in error["message"]
    assert run.status == "failed" and len(run.error) < 10_000 and run.error.endswith(TAIL)


async def test_the_events_route_follows_past_an_over_long_line_to_the_end(jp_fetch):
    run = RunStore().create("job", "long", status="running")
    files = RunFiles.of(run.id).create()
    with EventLog(files.events) as log:
        log.append("start", total_steps=1)
    with open(files.events, "a") as raw:  # as an older jiyu wrote it: the whole message on one line
        raw.write(json.dumps({"t": 1.0, "kind": "error", "message": LONG, "rank": 0}) + "\n")
    with EventLog(files.events) as log:
        log.append("end", status="failed", message="RuntimeError")
    RunStore().finish(run.id, "failed", error="RuntimeError")
    offset, seen, requests = 0, [], 0
    while requests < 20:
        reply = json.loads((await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": offset})).body)
        requests += 1
        seen += reply["events"]
        if reply["offset"] == offset:
            break
        offset = reply["offset"]
    assert offset == files.events.stat().st_size, "the follower stood still inside the log"
    assert [e["kind"] for e in seen] == ["start", "error", "end"]
    assert seen[1]["message"].startswith(HEAD) and seen[1]["message"].endswith(TAIL)
    assert len(json.dumps(seen[1])) < 20_000
