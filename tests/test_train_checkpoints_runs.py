"""Checkpoints survive a writer killed mid-save; runs are registered, or attached to a
launcher's run (which then owns the status) and resumed automatically after a restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.train import TrainConfigError, fit
from jiyu_magics.train.checkpoint import FORMAT, load_checkpoint, newest_checkpoint, save_atomic

from .conftest import ROOT
from .train_models import blobs, loader, mlp

WRITER = """
import sys, torch
from jiyu_magics.train.checkpoint import FORMAT, save_atomic
folder = sys.argv[1]
save_atomic({"format": FORMAT, "step": 1, "weights": torch.ones(10)}, folder + "/step-00000001.pt")
print("first saved", flush=True)
big = {"format": FORMAT, "step": 2, "weights": torch.randn(60_000_000)}   # ~240 MB: a save takes a while
while True:
    save_atomic(big, folder + "/step-00000002.pt")
"""


def test_a_writer_killed_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "first saved"
        deadline = time.time() + 60
        while not list(tmp_path.glob(".step-00000002.pt.tmp-*")) and time.time() < deadline:
            time.sleep(0.005)
        assert list(tmp_path.glob(".step-00000002.pt.tmp-*")), "the second save never started"
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    final = tmp_path / "step-00000002.pt"
    if final.exists():  # the kill landed after a complete save: that file must be whole too
        assert load_checkpoint(final)["step"] == 2
    else:
        assert newest_checkpoint(tmp_path) == tmp_path / "step-00000001.pt"
    assert load_checkpoint(tmp_path / "step-00000001.pt")["weights"].sum() == 10
    save_atomic({"format": FORMAT, "step": 3}, tmp_path / "step-00000003.pt")
    assert not list(tmp_path.glob(".*.tmp-*")), "the next save removes a dead writer's temporary file"


def test_only_this_hosts_dead_writers_temporaries_are_removed(tmp_path):
    """A checkpoint folder on a shared filesystem holds other nodes' temporaries: their pids say
    nothing on this host, and removing one would cut a save in progress there."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    save_atomic({"format": FORMAT, "step": 1}, tmp_path / "step-00000001.pt")
    here = socket.gethostname()
    other_nodes = tmp_path / f".step-00000002.pt.tmp-node-7.cluster-{dead.pid}"
    dead_here = tmp_path / f".step-00000003.pt.tmp-{here}-{dead.pid}"
    before_hosts = tmp_path / f".step-00000004.pt.tmp-{dead.pid}"  # a name of an earlier release
    live_here = tmp_path / f".step-00000005.pt.tmp-{here}-{os.getpid()}"
    for temp in (other_nodes, dead_here, before_hosts, live_here):
        temp.write_bytes(b"partial")

    assert newest_checkpoint(tmp_path) == tmp_path / "step-00000001.pt"

    assert sorted(p.name for p in tmp_path.glob(".*.tmp-*")) == sorted([other_nodes.name, live_here.name])


def test_kernel_run_is_registered_and_finished():
    model = mlp()
    result = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    run = RunStore().get(result.run_id)
    assert run.kind == "kernel" and run.status == "succeeded" and run.pid == os.getpid()
    assert run.name == "Sequential" and run.ended is not None


def test_attached_run_keeps_its_status_and_gets_one_start_per_call(monkeypatch):
    run = RunStore().create("job", "launched", status="running", pid=os.getpid())
    monkeypatch.setenv("JIYU_RUN_ID", run.id)
    model = mlp()
    first = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    second = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    assert first.run_id == second.run_id == run.id
    assert RunStore().get(run.id).status == "running", "the launcher owns the status"
    events = read_events(RunFiles.of(run.id).events)[0]
    assert [e["kind"] for e in events].count("start") == 2
    assert first.last_checkpoint.startswith(str(RunFiles.of(run.id).ckpt))
    assert os.path.basename(second.last_checkpoint).startswith("fit2-"), "a second call must not overwrite the first's"


@pytest.mark.parametrize("trigger", [{"TORCHELASTIC_RESTART_COUNT": "1"}, {"JIYU_RESUME": "last"}])
def test_attached_run_resumes_from_its_last_checkpoint_when_restarted(monkeypatch, trigger):
    run = RunStore().create("job", "launched", status="running", pid=os.getpid())
    monkeypatch.setenv("JIYU_RUN_ID", run.id)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    first = fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), epochs=4, max_steps=10)
    for name, value in trigger.items():
        monkeypatch.setenv(name, value)
    restarted = mlp()  # a restarted worker builds its objects afresh
    again = fit(
        restarted,
        torch.optim.SGD(restarted.parameters(), 0.1),
        loader(blobs()),
        loss_fn=nn.CrossEntropyLoss(),
        epochs=4,
    )
    start = [e for e in read_events(RunFiles.of(run.id).events)[0] if e["kind"] == "start"][-1]
    assert start["start_step"] == first.step == 10 and start["resumed_from"] == first.last_checkpoint
    assert again.step == 32


def test_a_fresh_attached_run_without_checkpoints_starts_from_zero_after_restart(monkeypatch):
    run = RunStore().create("job", "launched", status="running", pid=os.getpid())
    monkeypatch.setenv("JIYU_RUN_ID", run.id)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    model = mlp()
    result = fit(model, torch.optim.SGD(model.parameters(), 0.1), loader(blobs()), loss_fn=nn.CrossEntropyLoss())
    assert result.step == 8


def test_resume_last_finds_the_newest_checkpoint_of_the_same_name():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), name="exp", max_steps=3)
    other = fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), name="other", max_steps=5)
    resumed = fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), name="exp", resume="last", epochs=2)
    assert resumed.step == 16 and other.step == 5
    start = [e for e in read_events(RunFiles.of(resumed.run_id).events)[0] if e["kind"] == "start"][0]
    assert start["start_step"] == 3


def test_resume_errors_are_one_line():
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), 0.1)
    with pytest.raises(TrainConfigError, match="no checkpoint of an earlier run named 'nothing'"):
        fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), name="nothing", resume="last")
    with pytest.raises(TrainConfigError, match="does not exist"):
        fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), resume="/nope/step-1.pt")
    done = fit(model, optimizer, loader(blobs()), loss_fn=nn.CrossEntropyLoss(), max_steps=1)
    wider = mlp(hidden=64)
    with pytest.raises(TrainConfigError, match="does not fit this model"):
        fit(
            wider,
            torch.optim.SGD(wider.parameters(), 0.1),
            loader(blobs()),
            loss_fn=nn.CrossEntropyLoss(),
            resume=done.last_checkpoint,
        )
    assert all(r.status != "running" for r in RunStore().list()), "a rejected resume leaves no run running"
