"""``GET /jiyu/api/runs/{id}/stacks`` through a real server: the newest dump of a run, grouped
as ``jiyu stacks`` groups it; an empty answer for a run that never stalled, 404 for no run.
The dumps here are written as ``jobs.stack_dump`` writes them (faulthandler's text); the real
dump of a stalled 2-rank run is tests/test_stall.py's."""

from __future__ import annotations

import pytest
from tornado.httpclient import HTTPClientError

from jiyu_magics.core.runs.files import RunFiles

from .server_fixtures import body, live_run, server_config

WAITING = """Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait

Current thread 0x00007f00 (most recent call first):
  File "/venv/site-packages/torch/distributed/distributed_c10d.py", line 4159 in barrier
  File "/runs/a/job.py", line 30 in train_step
  File "/runs/a/job.py", line 41 in <module>
"""
SLEEPING = """Current thread 0x00007f02 (most recent call first):
  File "/runs/a/job.py", line 17 in train_step
  File "/runs/a/job.py", line 41 in <module>
"""


@pytest.fixture
def jp_server_config():
    return server_config()


async def test_the_newest_dump_grouped_by_identical_stacks(jp_fetch):
    run = live_run("stuck")
    stacks = RunFiles.of(run.id).stacks
    (stacks / "20261201T010000").mkdir(parents=True)
    (stacks / "20261201T010000" / "rank0.txt").write_text(SLEEPING)  # an older dump
    newest = stacks / "20261201T020000"
    newest.mkdir()
    for rank, text in enumerate([WAITING, WAITING.replace("0x00007f00", "0x00007f09"), WAITING, SLEEPING]):
        (newest / f"rank{rank}.txt").write_text(text)
    dump = body(await jp_fetch("jiyu", "api", "runs", run.id, "stacks"))
    assert (dump["run_id"], dump["dumped"]) == (run.id, "20261201T020000")
    assert [(g["ranks"], g["headline"]) for g in dump["groups"]] == [
        ([3], "rank 3 is in train_step (job.py:17)"),
        ([0, 1, 2], "ranks 0, 1, 2 are in barrier (distributed_c10d.py:4159), from train_step (job.py:30)"),
    ]
    assert dump["groups"][1]["frames"][0] == {
        "file": "/venv/site-packages/torch/distributed/distributed_c10d.py",
        "line": 4159,
        "func": "barrier",
        "kind": "library",  # the user's code, a library's, or jiyu's plumbing (folded by the views)
        "cell": None,  # no line map (this run exported no notebook): named by file
        "source": None,
    }


async def test_a_run_that_never_stalled_has_none_and_an_unknown_run_is_404(jp_fetch):
    run = live_run("calm")
    assert body(await jp_fetch("jiyu", "api", "runs", run.id, "stacks")) == {
        "run_id": run.id,
        "dumped": None,
        "groups": [],
    }
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("jiyu", "api", "runs", "nosuchrun", "stacks")
    assert missing.value.code == 404
