"""The server's background upkeep outlives what its requests import: a real ``jupyter server``
(its own process, so the jobs package is imported there for the first time, as in production)
takes a REST submit before its first upkeep tick, and its upkeep still records a run whose
processes are gone as ``lost`` afterwards.

Before issue 36 the submit imported the ``jobs.upkeep`` module, whose name shadowed the
``jobs.upkeep`` function on the package: every later tick failed with "'module' object is not
callable", and lost runs, GPU-hour samples and the Slurm follower stopped for good."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import nbformat

from jiyu_magics.core.store.run_store import RunStore

from .lab_runner import jupyter_lab
from .trackers_tools import wait_for

TICK_S = 5  # the upkeep's period here; a server answers its first request well within it


def post(lab, path: str, payload: dict) -> dict:
    request = urllib.request.Request(
        f"{lab.url}{path}",
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_submit_right_after_start_leaves_the_upkeep_running(tmp_path, monkeypatch, torchrun_tmp):
    with jupyter_lab(tmp_path, {}, app="jupyter_server", args=(f"--JiyuApp.usage_sample_interval={TICK_S}",)) as server:
        monkeypatch.setenv("JIYU_HOME", str(server.home))
        quick = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('ran')")])
        nbformat.write(quick, server.root / "q.ipynb")
        submitted = post(server, "jiyu/api/runs", {"notebook": "q.ipynb", "gpus": 0})
        store = RunStore()
        wait_for(lambda: not store.get(submitted["id"]).active, timeout=120, message="the submitted job to end")
        assert store.get(submitted["id"]).status == "succeeded"
        # after the job's own supervisor took its upkeep: only the server's can record this one
        ghost = store.create("job", "ghost", status="running", pid=dead_pid())
        wait_for(
            lambda: store.stored(ghost.id).status == "lost",
            timeout=10 * TICK_S,
            message="the server's upkeep to record the run whose process is gone (see jupyter_lab.log)",
        )
    log = (tmp_path / "jupyter_lab.log").read_text()
    assert "not callable" not in log and "Traceback" not in log, log[-3000:]
