"""A corrupt or deleted run store, for real: the file overwritten with garbage or removed. Every
entry point says so in one line, training in a kernel goes on, and `jiyu store repair` brings
every run back from its folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook
from tornado.httpclient import HTTPClientError

from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.repair import FROM_LOG, FROM_RECORD
from jiyu_magics.core.store.run_row import RECORD_FILE
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .server_fixtures import server_config


@pytest.fixture
def jp_server_config():
    return server_config()


def finished_run(name: str, status: str = "succeeded", steps: int = 3) -> str:
    store = RunStore()
    run = store.create("job", name, status="running", nproc=2, params={"lr": 0.1})
    files = RunFiles.of(run.id).create()
    with EventLog(files.events) as log:
        log.append("start", name=name, total_steps=steps, nproc=2)
        for step in range(1, steps + 1):
            log.append("step", step=step, loss=1.0 / step)
        log.append("end", status=status, step=steps)
    store.finish(run.id, status, exit_code=0 if status == "succeeded" else 1)
    return run.id


def corrupt_store() -> None:
    path = store_path()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not a database " * 200)


def listing() -> dict[str, tuple[str, str]]:
    done = jiyu("jobs", "--all", "--json")
    assert done.returncode == 0, done.stderr
    return {r["id"]: (r["name"], r["status"]) for r in json.loads(done.stdout)}


def test_a_corrupt_store_is_one_line_everywhere_and_repair_restores_every_run():
    ids = [finished_run("first"), finished_run("second", "failed")]
    before = listing()
    corrupt_store()
    for args in (["jobs"], ["jobs", "--all", "--json"], ["logs", ids[0]]):
        done = jiyu(*args)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert "is unusable" in done.stderr and "jiyu store repair" in done.stderr
    check = jiyu("doctor", "--store")
    assert check.returncode == 1 and "PROBLEM" in check.stdout and "cannot be read" in check.stdout
    repaired = jiyu("store", "repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "Set the broken store aside" in repaired.stdout and "2 run(s) restored" in repaired.stdout
    assert listing() == before == {ids[0]: ("first", "succeeded"), ids[1]: ("second", "failed")}
    assert RunStore().get(ids[0]).params == {"lr": 0.1}
    assert jiyu("doctor", "--store").returncode == 0
    assert list(store_path().parent.glob("jiyu.sqlite.broken-*")), "the broken file must be kept, set aside"


def test_a_deleted_store_is_rebuilt_also_from_folders_without_a_saved_row():
    kept = finished_run("kept")
    old = finished_run("older-version", "stopped")
    (RunFiles.of(old).root / RECORD_FILE).unlink()  # as written by a jiyu before run.json existed
    store_path().unlink()
    check = jiyu("doctor", "--store")
    assert check.returncode == 1 and "does not exist" in check.stdout and "2 run folder(s) have no row" in check.stdout
    assert jiyu("store", "repair").returncode == 0
    runs = {r.id: r for r in RunStore().list()}
    assert (runs[kept].name, runs[kept].status, runs[kept].nproc) == ("kept", "succeeded", 2)
    assert (runs[old].name, runs[old].status, runs[old].kind) == ("older-version", "stopped", "ddp")
    # their history begins with the restore and its reason: the moves before it were in the lost file
    assert RunStore().history(kept) == [(None, "succeeded", FROM_RECORD)]
    assert RunStore().history(old) == [(None, "stopped", FROM_LOG)]


def test_repair_of_a_readable_store_adds_the_missing_runs_and_keeps_its_rows():
    """A run's record is its row as it was created or ended; the live row is newer. So a repair
    of a store that reads fine only adds the runs whose folders have no row."""
    kept = finished_run("row-name")
    record = RunFiles.of(kept).root / RECORD_FILE
    record.write_text(json.dumps({**json.loads(record.read_text()), "name": "stale-record-name"}))
    missing = finished_run("copied-in")
    with RunStore().db.write() as db:  # as a folder copied from another machine's JIYU_HOME
        db.execute("DELETE FROM runs WHERE id = ?", (missing,))
    repaired = jiyu("store", "repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "Set the broken store aside" not in repaired.stdout
    assert "1 run(s) restored" in repaired.stdout and "1 run(s) already in the store kept" in repaired.stdout
    assert listing() == {kept: ("row-name", "succeeded"), missing: ("copied-in", "succeeded")}
    history = RunStore().history(kept)
    assert history[0] == (None, "running", "registered") and FROM_RECORD not in {reason for *_, reason in history}
    assert RunStore().history(missing)[-1] == (None, "succeeded", FROM_RECORD)


def test_repair_brings_back_a_running_runs_owner_and_an_older_record_has_none():
    """A kernel-owned ``%%train --nproc`` run whose torchrun has just exited: its record
    carries the owner, so the rebuilt store does not call it lost while the kernel (here this
    process) lives. A record from before owners were recorded reads as having none."""
    torchrun = subprocess.Popen([sys.executable, "-c", "pass"])
    torchrun.wait()
    owned = (
        RunStore()
        .create(
            "ddp",
            "owned",
            status="running",
            pid=torchrun.pid,
            owner_pid=os.getpid(),
            owner_started=process_start_time(os.getpid()),
        )
        .id
    )
    older = finished_run("older")
    record = RunFiles.of(older).root / RECORD_FILE
    row = json.loads(record.read_text())
    record.write_text(json.dumps({k: v for k, v in row.items() if not k.startswith("owner_")}))
    store_path().unlink()
    assert jiyu("store", "repair").returncode == 0
    runs = {r.id: r for r in RunStore().list()}
    assert (runs[owned].status, runs[owned].owner_pid) == ("running", os.getpid())
    assert (runs[older].status, runs[older].owner_pid, runs[older].owner_started) == ("succeeded", None, None)


async def test_the_rest_api_answers_503_with_the_reason(jp_fetch):
    finished_run("served")
    corrupt_store()
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("jiyu", "api", "runs")
    assert refused.value.code == 503
    assert "jiyu store repair" in json.loads(refused.value.response.body)["message"]


def test_training_in_a_kernel_goes_on_when_the_store_is_unusable(ip, capsys):
    corrupt_store()
    ip.run_cell(
        "import torch\nfrom torch.utils.data import TensorDataset\ntorch.manual_seed(0)\n"
        "model = torch.nn.Linear(4, 1)\nbefore = model.weight.detach().clone()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloss_fn = torch.nn.MSELoss()\n"
        "train_loader = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\n"
    )
    result = ip.run_cell("%train --batch-size 8 --epochs 1")
    assert result.error_in_exec is None
    assert ip.user_ns["train_result"].status == "succeeded"
    assert not ip.user_ns["model"].weight.detach().equal(ip.user_ns["before"]), "the model did not train"
    err = capsys.readouterr().err
    assert "this run is not recorded in the run store, training goes on" in err
    listing_magic = ip.run_cell("%jobs")
    assert type(listing_magic.error_in_exec).__name__ == "StoreUnusable"


def test_a_home_folder_that_cannot_be_made_is_one_line_everywhere(ip, tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("")
    nbformat.write(new_notebook(cells=[new_code_cell("print('hi')")]), tmp_path / "nb.ipynb")
    home = tmp_path / "a-file" / "jiyu"
    monkeypatch.setenv("JIYU_HOME", str(home))
    line = f"the jiyu home folder {home} cannot be made (Not a directory): set JIYU_HOME to a folder you can write"
    for args in (["jobs"], ["logs", "feedbeef"], ["submit", str(tmp_path / "nb.ipynb")]):
        done = jiyu(*args)
        assert (done.returncode, done.stderr) == (1, f"jiyu {args[0]}: error: {line}\n")
    ip.run_cell(
        "import torch\nmodel = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loss_fn = torch.nn.MSELoss()\ntrain_loader = [(torch.randn(8, 4), torch.randn(8, 1))]\n"
    )
    capsys.readouterr()
    for cell in ("%jobs", "%train --max-steps 1"):
        result = ip.run_cell(cell)
        assert type(result.error_in_exec).__name__ == "StoreUnusable" and str(result.error_in_exec) == line
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "training goes on" not in out.err
