"""The server extension's REST API through a real jupyter_server (pytest-jupyter's jp_fetch),
with authentication required on every route as in production."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from tornado.httpclient import HTTPClientError

from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.server.handlers import ROUTES

from .conftest import ROOT
from .server_fixtures import (
    body,
    coloured_traceback,
    concrete,
    ended_run,
    live_run,
    run_routes,
    server_config,
    training_events,
)


async def fails(fetch_call) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await fetch_call
    response = caught.value.response
    return caught.value.code, json.loads(response.body) if response and response.body else {}


# -- authentication -----------------------------------------------------------------------


async def test_every_route_refuses_requests_without_credentials(jp_serverapp, http_server_client):
    """Walks the live routing table: a route added later without @authenticated fails here."""
    run = live_run()
    routes = run_routes(jp_serverapp.web_app)
    assert sorted(handler.__name__ for _, handler in routes) == sorted(h.__name__ for _, h in ROUTES)
    checked = 0
    for pattern, handler in routes:
        for verb in ("get", "post", "put", "patch", "delete"):
            if verb not in vars(handler) and not any(
                verb in vars(base) for base in handler.__mro__[1:] if base.__module__.startswith("jiyu_magics")
            ):
                continue
            path = concrete(pattern, run.id)
            for headers in ({}, {"Authorization": "token not-the-token"}):
                response = await http_server_client.fetch(
                    path,
                    method=verb.upper(),
                    headers=headers,
                    raise_error=False,
                    body=b"{}" if verb in ("post", "put", "patch") else None,
                    follow_redirects=False,
                )
                assert response.code == 403, f"{verb.upper()} {path} with {headers} answered {response.code}"
                checked += 1
    assert checked >= 2 * 8  # seven routes, GET on six and POST on two


async def test_token_authenticated_requests_are_answered(jp_fetch):
    response = await jp_fetch("jiyu", "api", "runs")
    assert response.code == 200
    assert body(response) == {"runs": []}


async def test_post_from_a_cookie_session_needs_the_xsrf_token(jp_fetch):
    """Browsers authenticate with the login cookie; a write then needs the XSRF token too."""
    login = await jp_fetch("jiyu", "api", "runs")
    cookie = "; ".join(c.split(";", 1)[0] for c in login.headers.get_list("Set-Cookie"))
    assert cookie.startswith("username-"), login.headers.get_list("Set-Cookie")
    code, reply = await fails(
        jp_fetch(
            "jiyu", "api", "runs", method="POST", body=b"not json", headers={"Authorization": "", "Cookie": cookie}
        )
    )
    assert code == 403 and "_xsrf" in reply["message"]
    xsrf = "ab" * 16
    code, reply = await fails(
        jp_fetch(
            "jiyu",
            "api",
            "runs",
            method="POST",
            body=b"not json",
            headers={"Authorization": "", "Cookie": f"{cookie}; _xsrf={xsrf}", "X-XSRFToken": xsrf},
        )
    )
    assert code == 400 and "not valid JSON" in reply["message"]  # past XSRF, stopped by validation


# -- GPUs -----------------------------------------------------------------------------------


@pytest.mark.driverless
async def test_gpus_without_a_driver_say_why_with_the_doctors_finding(jp_fetch):
    snap = body(await jp_fetch("jiyu", "api", "gpus"))
    assert snap["available"] is False and snap["devices"] == []
    assert "NVML" in snap["reason"]
    assert snap["doctor"]["level"] == "problem" and snap["doctor"]["fix"]


async def test_gpus_are_the_gpu_status_snapshot_records(nvml_double, jp_fetch):
    snap = body(await jp_fetch("jiyu", "api", "gpus"))
    assert snap["available"] is True and snap["doctor"] is None
    h100, t4 = snap["devices"]
    assert (h100["name"], h100["gpu_util"], h100["mem_total"], h100["power_draw"]) == (
        "NVIDIA H100 80GB HBM3",
        45,
        80 * 2**30,
        250.0,
    )
    assert t4["gpu_util"] is None and t4["mem_used"] == 2**30  # unsupported → null, never an error


async def test_a_slow_nvml_read_blocks_neither_the_server_nor_a_second_read(jp_serverapp, jp_fetch):
    """NVML is held mid-read (a GPU falling off the bus can take seconds): other requests are
    still answered, and three concurrent GPU requests share that one read."""
    from jiyu_magics.server.gpu_sampler import GpuSampler, read_gpus

    release, reads = threading.Event(), []

    def held_read(holders) -> dict:
        reads.append(threading.current_thread().name)
        assert release.wait(60)
        return read_gpus(holders=holders)

    app = jp_serverapp.web_app.settings["jiyu_magics"]  # the JiyuApp the handlers use
    app.sampler = GpuSampler(max_age=60, read=held_read)
    pending = [asyncio.ensure_future(jp_fetch("jiyu", "api", "gpus")) for _ in range(3)]
    runs = await jp_fetch("jiyu", "api", "runs")
    assert runs.code == 200 and not any(p.done() for p in pending)
    release.set()
    replies = [body(r) for r in await asyncio.gather(*pending)]
    assert reads == ["jiyu-nvml_0"] and replies[0] == replies[1] == replies[2]


# -- runs -----------------------------------------------------------------------------------


async def test_runs_carry_their_event_log_summary(jp_fetch):
    run = live_run("mlp")
    training_events(run, steps=5, total=20)
    finished = ended_run("kernel", "earlier")
    listed = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    assert [r["id"] for r in listed] == [finished.id, run.id]  # newest first
    mine = listed[1]
    assert (mine["status"], mine["kind"], mine["nproc"]) == ("running", "job", 2)
    s = mine["summary"]
    assert (s["step"], s["total_steps"], s["progress"], s["loss"], s["val_acc"]) == (5, 20, 0.25, 0.4, 0.71)
    assert s["losses"] == [2.0, 1.0, 2.0 / 3, 0.5, 0.4]
    assert mine["duration"] >= 0
    one = body(await jp_fetch("jiyu", "api", "runs", run.id))
    assert one["id"] == run.id and one["summary"]["step"] == 5


async def test_a_run_whose_process_died_is_listed_as_lost(jp_fetch):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    run = RunStore().create("job", "ghost", status="running", pid=proc.pid)
    listed = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    assert [(r["id"], r["status"]) for r in listed] == [(run.id, "lost")]


async def test_unknown_runs_are_404_with_a_message(jp_fetch):
    for parts in (("runs", "deadbeef"), ("runs", "deadbeef", "events"), ("runs", "deadbeef", "log")):
        code, reply = await fails(jp_fetch("jiyu", "api", *parts))
        assert (code, reply["message"]) == (404, "no run with id 'deadbeef'")
    code, reply = await fails(jp_fetch("jiyu", "api", "runs", "deadbeef", "stop", method="POST", body=b""))
    assert code == 404


async def test_events_are_read_by_byte_offset(jp_fetch):
    run = live_run()
    files = training_events(run, steps=3)
    first = body(await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": "0"}))
    assert [e["kind"] for e in first["events"]] == ["start", "step", "step", "step", "val"]
    assert first["offset"] == files.events.stat().st_size
    again = body(await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": first["offset"]}))
    assert again == {"events": [], "offset": first["offset"]}
    with EventLog(files.events) as log:
        log.append("end", status="succeeded", step=3)
    more = body(await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": first["offset"]}))
    assert [e["kind"] for e in more["events"]] == ["end"]


async def test_ranks_are_each_ranks_own_record(jp_fetch):
    from jiyu_magics.jobs.process.rank_records import RankRecord, write

    run = live_run()
    assert body(await jp_fetch("jiyu", "api", "runs", run.id, "ranks")) == {"ranks": []}
    write(
        run.id,
        RankRecord(
            rank=1, local_rank=1, pid=os.getpid(), started=1.0, ended=2.0, exit_code=1, error="ValueError: bad batch"
        ),
    )
    write(run.id, RankRecord(rank=0, local_rank=0, pid=os.getpid(), started=1.0, ended=2.0, exit_code=0))
    ranks = body(await jp_fetch("jiyu", "api", "runs", run.id, "ranks"))["ranks"]
    assert [(r["rank"], r["state"], r["exit_code"], r["error"]) for r in ranks] == [
        (0, "exited", 0, None),
        (1, "exited", 1, "ValueError: bad batch"),
    ]
    code, reply = await fails(jp_fetch("jiyu", "api", "runs", "deadbeef", "ranks"))
    assert code == 404


async def test_ranks_say_how_each_ended_stopped_or_killed_by_a_signal(jp_fetch):
    """A rank that stopped on request says so; one killed by a signal wrote no end, and which
    signal only torchrun's agent saw: its line in the run's log names it."""
    from jiyu_magics.jobs.process.rank_records import RankRecord, write

    run = live_run()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has now: the rank that never reported its end
    write(run.id, RankRecord(rank=0, local_rank=0, pid=os.getpid(), started=1.0, ended=2.0, exit_code=0, stopped=True))
    write(run.id, RankRecord(rank=1, local_rank=1, pid=gone.pid, started=1.0))
    files = RunFiles.of(run.id)
    files.log.write_text(
        f"[rank0]: step 3\nE1201 05:23:07.857000 19250 torch/distributed/elastic/multiprocessing/"
        f"api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: {gone.pid}) of binary: python\n"
    )
    ranks = body(await jp_fetch("jiyu", "api", "runs", run.id, "ranks"))["ranks"]
    assert [(r["state"], r["stopped"], r["signal"], r["signal_name"]) for r in ranks] == [
        ("exited", True, None, None),
        ("killed", False, 9, "SIGKILL"),
    ]


@pytest.mark.parametrize("offset", ["-1", "abc", "1.5", "0x10", "²"])
async def test_bad_offsets_are_400(jp_fetch, offset):
    run = live_run()
    for what in ("events", "log"):
        code, reply = await fails(jp_fetch("jiyu", "api", "runs", run.id, what, params={"offset": offset}))
        assert code == 400 and "offset" in reply["message"]


@pytest.mark.parametrize("jp_server_config", [server_config(chunk_bytes=7)])
async def test_log_follows_in_chunks_without_splitting_characters(jp_fetch):
    run = live_run()
    text = "épоch 1 — loss 0.52 ✓\n步骤 2 loss 0.31\n"
    RunFiles.of(run.id).create().log.write_text(text, encoding="utf-8")
    seen, offset, replies = "", 0, 0
    while True:
        chunk = body(await jp_fetch("jiyu", "api", "runs", run.id, "log", params={"offset": offset}))
        replies += 1
        assert "\ufffd" not in chunk["text"] and chunk["active"] is True and chunk["status"] == "running"
        seen += chunk["text"]
        if chunk["offset"] == chunk["size"]:
            break
        assert chunk["offset"] > offset
        offset = chunk["offset"]
    assert seen == text and replies >= len(text.encode()) // 7
    code, reply = await fails(jp_fetch("jiyu", "api", "runs", run.id, "log", params={"offset": chunk["size"] + 1}))
    assert code == 400 and "past the end" in reply["message"]


@pytest.mark.parametrize("jp_server_config", [server_config(chunk_bytes=5)])
async def test_log_comes_without_terminal_colour_codes_even_cut_between_chunks(jp_fetch):
    """A rank's IPython traceback is coloured: the panel's Logs showed ``[91mValueError[39m``."""
    run = live_run()
    traceback = coloured_traceback()
    RunFiles.of(run.id).create().log.write_text(f"[rank1]: step 3\n{traceback}\nafter\n", encoding="utf-8")
    seen, offset = "", 0
    while True:
        chunk = body(await jp_fetch("jiyu", "api", "runs", run.id, "log", params={"offset": offset}))
        assert "\x1b" not in chunk["text"] and "[91m" not in chunk["text"] and "[39m" not in chunk["text"], chunk
        seen += chunk["text"]
        if chunk["offset"] == chunk["size"]:
            break
        assert chunk["offset"] > offset, "a chunk that holds back a cut code still moves on"
        offset = chunk["offset"]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", traceback)  # what the traceback says, as a terminal shows it
    assert seen == f"[rank1]: step 3\n{plain}\nafter\n"
    assert "ValueError: boom on rank 1" in seen


async def test_log_of_a_finished_run_says_no_more_will_come(jp_fetch):
    run = RunStore().create("job", "done", status="running", pid=os.getpid())
    RunStore().finish(run.id, "succeeded", exit_code=0)
    chunk = body(await jp_fetch("jiyu", "api", "runs", run.id, "log"))
    assert chunk == {"text": "", "offset": 0, "size": 0, "active": False, "status": "succeeded"}


# -- submit / stop: validation ----------------------------------------------------------


@pytest.fixture
def notebooks(jp_root_dir, tmp_path):
    (jp_root_dir / "train.ipynb").write_text("{}")
    (jp_root_dir / "notes.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.ipynb").write_text("{}")
    (jp_root_dir / "escape.ipynb").symlink_to(outside / "secret.ipynb")
    (jp_root_dir / "linked").symlink_to(outside, target_is_directory=True)
    return jp_root_dir


def _post(jp_fetch, payload, *parts):
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return jp_fetch("jiyu", "api", "runs", *parts, method="POST", body=data)


@pytest.mark.parametrize(
    "payload, code, words",
    [
        (b"{not json", 400, "not valid JSON"),
        (b'{"notebook": "train.ipynb", "params": {"lr": NaN}}', 400, "NaN is not JSON"),
        (b"", 400, "JSON object"),
        ([1, 2], 400, "JSON object"),
        ({}, 400, "'notebook' must be a path"),
        ({"notebook": 3}, 400, "'notebook' must be a path"),
        ({"notebook": "/etc/passwd.ipynb"}, 400, "relative to the server root"),
        ({"notebook": "~/train.ipynb"}, 400, "relative to the server root"),
        ({"notebook": "../outside/secret.ipynb"}, 400, "'..'"),
        ({"notebook": "sub/../../x.ipynb"}, 400, "'..'"),
        ({"notebook": "notes.txt"}, 400, "not a notebook"),
        ({"notebook": "missing.ipynb"}, 400, "no notebook at"),
        ({"notebook": "escape.ipynb"}, 403, "outside the server root"),
        ({"notebook": "linked/secret.ipynb"}, 403, "outside the server root"),
        ({"notebook": "train.ipynb", "nproc": 0}, 400, "'nproc'"),
        ({"notebook": "train.ipynb", "nproc": "2"}, 400, "'nproc'"),
        ({"notebook": "train.ipynb", "nproc": True}, 400, "'nproc'"),
        ({"notebook": "train.ipynb", "nproc": 100000}, 400, "'nproc'"),
        ({"notebook": "train.ipynb", "params": [1]}, 400, "'params'"),
        ({"notebook": "train.ipynb", "params": {"not valid": 1}}, 400, "not a Python identifier"),
        ({"notebook": "train.ipynb", "params": {"class": 1}}, 400, "not a Python identifier"),
        ({"notebook": "train.ipynb", "name": "x" * 500}, 400, "'name'"),
        ({"notebook": "train.ipynb", "nprocs": 2}, 400, "unknown field(s) 'nprocs'"),
        ({"notebook": "train.ipynb", "stall_timeout": -1}, 400, "'stall_timeout' -1: expected seconds >= 0 (0: off)"),
        ({"notebook": "train.ipynb", "stall_timeout": "300"}, 400, "'stall_timeout'"),
        ({"notebook": "train.ipynb", "stall_timeout": True}, 400, "'stall_timeout'"),
        (b'{"notebook": "train.ipynb", "stall_timeout": 1e400}', 400, "'stall_timeout'"),
        ({"notebook": "train.ipynb", "track": "wandb"}, 400, "'track' 'wandb': tracker 'wandb': expected"),
        ({"notebook": "train.ipynb", "track": 3}, 400, "'track' 3:"),
    ],
)
async def test_bad_submissions_are_refused_with_the_reason(jp_fetch, notebooks, payload, code, words):
    got, reply = await fails(_post(jp_fetch, payload))
    assert (got, words in reply["message"]) == (code, True), reply


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"notebook": "n" * 300 + ".ipynb"}, "too long"),
        ({"notebook": "/".join(["d"] * 2100) + "/x.ipynb"}, "too long"),
        (b'{"notebook": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
        (b'{"notebook": "train.ipynb", "name": "' + b"x" * (2 * 1024 * 1024) + b'"}', "larger than 1024 KiB"),
    ],
)
async def test_hostile_bodies_are_400_not_500(jp_fetch, notebooks, payload, words):
    got, reply = await fails(_post(jp_fetch, payload))
    assert (got, words in reply["message"]) == (400, True), reply


@pytest.mark.parametrize("offset", ["9223372036854775808", "9" * 5000])
async def test_offsets_beyond_any_file_are_400(jp_fetch, offset):
    run = live_run()
    training_events(run)
    for what in ("events", "log"):
        code, reply = await fails(jp_fetch("jiyu", "api", "runs", run.id, what, params={"offset": offset}))
        assert code == 400 and "past the end" in reply["message"] and len(reply["message"]) < 200


@pytest.mark.parametrize(
    "lines, words",
    [
        (
            ["lr = 3e-4", "layers = [64, 32"],
            "parameter line 2 ('layers = [64, 32'): '[64, 32' is not a valid Python literal",
        ),
        (
            ["", "# comment", "not valid = 1"],
            "parameter line 3 ('not valid = 1'): 'not valid' is not a Python identifier",
        ),
        (["class = 1"], "parameter line 1 ('class = 1'): 'class' is not a Python identifier"),
        (["lr 3e-4"], "parameter line 1 ('lr 3e-4'): expected NAME = VALUE"),
    ],
)
async def test_a_parameter_line_the_cli_grammar_cannot_read_is_a_400_naming_it(jp_fetch, notebooks, lines, words):
    code, reply = await fails(_post(jp_fetch, {"notebook": "train.ipynb", "param_lines": lines}))
    assert (code, reply.get("message")) == (400, words)
    assert RunStore().list() == [], "nothing was submitted"


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"param_lines": "lr = 1"}, "'param_lines' must be a list"),
        ({"param_lines": ["lr = 1", 2]}, "'param_lines' must be a list"),
        ({"param_lines": ["lr = 1"], "params": {"lr": 1}}, "not both"),
    ],
)
async def test_param_lines_must_be_a_list_of_text(jp_fetch, notebooks, payload, words):
    code, reply = await fails(_post(jp_fetch, {"notebook": "train.ipynb", **payload}))
    assert code == 400 and words in reply["message"], reply


async def test_parameter_lines_reach_the_job_as_the_cli_reads_them(jp_fetch, jp_root_dir, tmp_path, monkeypatch):
    """The panel sends the lines as typed; the job gets what ``-p NAME VALUE`` would give it."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    cells = [
        nbformat.v4.new_code_cell(
            "lr = 0.1\narch = 'mlp'\nlayers = []\nnote = None", metadata={"tags": ["parameters"]}
        ),
        nbformat.v4.new_code_cell("print('got', repr(lr), repr(arch), repr(layers), repr(note))"),
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), jp_root_dir / "params.ipynb")
    lines = ["lr = 3e-4", "", "# the model", "arch = resnet", "layers = [64, 32]", "note = 'a = b'"]
    reply = body(await _post(jp_fetch, {"notebook": "params.ipynb", "param_lines": lines, "name": "lines"}))
    expected = {"lr": 3e-4, "arch": "resnet", "layers": [64, 32], "note": "a = b"}
    assert reply["params"] == expected
    from jiyu_magics.jobs.export.params import parse_pairs

    assert parse_pairs([("lr", "3e-4"), ("arch", "resnet"), ("layers", "[64, 32]"), ("note", "'a = b'")]) == expected
    done = await asyncio.to_thread(wait_until_ended, reply["id"])
    assert done.status == "succeeded", RunFiles.of(done.id).log.read_text()[-2000:]
    assert "got 0.0003 'resnet' [64, 32] 'a = b'" in RunFiles.of(done.id).log.read_text()


async def test_a_stall_timeout_reaches_the_jobs_launch_as_the_cli_gives_it(
    jp_fetch, jp_root_dir, tmp_path, monkeypatch
):
    """``"stall_timeout": S`` is ``jiyu submit --stall-timeout S``: the supervisor's launch spec
    holds it (tests/test_stall.py follows one such job to its stall)."""
    from jiyu_magics.jobs.launch_spec import LaunchSpec

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]), jp_root_dir / "quick.ipynb"
    )
    for timeout, expected in ((2.5, 2.5), (0, 0.0), (None, None)):
        payload = {"notebook": "quick.ipynb", "gpus": 0, **({} if timeout is None else {"stall_timeout": timeout})}
        reply = body(await _post(jp_fetch, payload))
        assert LaunchSpec.load(RunFiles.of(reply["id"])).stall_timeout == expected
        done = await asyncio.to_thread(wait_until_ended, reply["id"])
        assert done.status == "succeeded", RunFiles.of(done.id).log.read_text()[-2000:]


async def test_track_reaches_the_jobs_launch_as_the_cli_gives_it(jp_fetch, jp_root_dir, tmp_path, monkeypatch):
    """``"track": "..."`` is ``jiyu submit --track ...``: the launch spec holds the absolute
    destinations its owner follows (tests/test_trackers.py follows such a job)."""
    from jiyu_magics.jobs.launch_spec import LaunchSpec

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")]), jp_root_dir / "quick.ipynb"
    )
    payload = {"notebook": "quick.ipynb", "gpus": 0, "track": f"tensorboard:{tmp_path / 'tb'},mlflow:x.db"}
    reply = body(await _post(jp_fetch, payload))
    spec = LaunchSpec.load(RunFiles.of(reply["id"]))
    assert spec.track == [f"tensorboard:{tmp_path / 'tb'}", f"mlflow:sqlite:///{Path.cwd() / 'x.db'}"]
    done = await asyncio.to_thread(wait_until_ended, reply["id"])
    assert done.status == "succeeded", RunFiles.of(done.id).log.read_text()[-2000:]


def wait_until_ended(run_id: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = RunStore().get(run_id)
        if not run.active:
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} still {RunStore().get(run_id).status} after {timeout} s")


async def test_a_valid_submission_without_the_jobs_layer_is_503(jp_fetch, notebooks, monkeypatch):
    monkeypatch.setitem(sys.modules, "jiyu_magics.jobs", None)  # an installation without jobs/
    code, reply = await fails(_post(jp_fetch, {"notebook": "train.ipynb", "nproc": 2, "params": {"lr": 0.1}}))
    assert code == 503 and "jobs" in reply["message"]


async def test_stopping_an_in_kernel_run_is_a_conflict(jp_fetch):
    run = live_run(kind="kernel")
    code, reply = await fails(_post(jp_fetch, b"", run.id, "stop"))
    assert code == 409 and "interrupt that kernel" in reply["message"]
    assert RunStore().get(run.id).status == "running"


async def test_stopping_a_finished_run_returns_it_unchanged(jp_fetch):
    run = RunStore().create("job", "done", status="running", pid=os.getpid())
    RunStore().finish(run.id, "failed", exit_code=1, error="boom")
    reply = body(await _post(jp_fetch, b"", run.id, "stop"))
    assert (reply["status"], reply["error"]) == ("failed", "boom")


# -- the rest ---------------------------------------------------------------------------


def test_server_modules_leave_torch_unloaded():
    code = (
        "import sys, jiyu_magics.server.app, jiyu_magics.server.handlers as h\n"
        "from jiyu_magics.server.gpu_sampler import read_gpus\n"
        "from jiyu_magics.server.metrics import render\n"
        "render(read_gpus(), [], {})\n"
        "print(sorted(m for m in ('torch', 'IPython', 'ipywidgets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_settings_are_validated():
    from traitlets import TraitError

    from jiyu_magics.server.app import JiyuApp

    for bad in ({"refresh_interval": 0}, {"stop_grace": -1}, {"runs_limit": 0}, {"chunk_bytes": 0}):
        with pytest.raises(TraitError):
            JiyuApp(**bad)
    assert "Prometheus" in JiyuApp.class_traits()["metrics_token"].help
