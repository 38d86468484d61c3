"""DDP and FSDP inside the engine, with real ``torchrun --standalone --nproc-per-node 2`` (gloo
on this CPU machine) running tests/ddp_train_script.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import torch
from torch import nn

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.train import fit
from jiyu_magics.train.checkpoint import load_checkpoint

from .conftest import ROOT

SCRIPT = Path(__file__).with_name("ddp_train_script.py")


def torchrun(mode: str, out: Path, nproc: int = 2, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    """Runs the script under torchrun; every torchelastic temp folder stays in ``out``. On a
    timeout the whole tree goes (killing torchrun alone would orphan its workers)."""
    environment = dict(os.environ, TMPDIR=str(out), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--log-dir={out / 'logs'}",
        str(SCRIPT),
        mode,
        str(out),
    ]
    launcher = subprocess.Popen(
        command,
        env=environment,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(launcher.pid)
        launcher.communicate()
        raise AssertionError(f"torchrun {mode} did not finish in {timeout} s") from None
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers, f"processes left behind: {leftovers}"
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
        tree = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(tree, timeout=10)


def seen(out: Path, rank: int) -> dict:
    return json.loads((out / f"seen-{rank}.json").read_text())


def model_like_the_script() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))


def test_two_rank_ddp_shards_the_loader_and_only_rank_zero_writes(tmp_path):
    run = RunStore().create("job", "launched", status="running", pid=os.getpid())
    finished = torchrun("loader", tmp_path, JIYU_RUN_ID=run.id)
    assert finished.returncode == 0, finished.stderr[-3000:]
    ranks = [seen(tmp_path, r) for r in (0, 1)]
    assert [r["status"] for r in ranks] == ["succeeded", "succeeded"] and ranks[0]["step"] == 16
    first, second = (set(r["seen"]) for r in ranks)
    assert not first & second and first | second == set(range(256)), "disjoint shards covering the data"
    assert ranks[0]["history"] == ranks[1]["history"], "metrics are averaged over ranks, the same everywhere"
    losses = [row["loss"] for row in ranks[0]["history"] if row["loss"] is not None]
    assert losses[-1] < 0.8 * losses[0]
    files = RunFiles.of(run.id)
    # run.json: the row, for `jiyu store repair`; stacks/: each rank's own faulthandler file, for a stall's dump
    assert sorted(p.name for p in files.root.iterdir()) in (
        ["ckpt", "events.jsonl", "run.json"],
        ["ckpt", "events.jsonl", "run.json", "stacks"],
    )
    assert all(p.suffix == ".live" for p in (files.root / "stacks").glob("*")), "no dump without a stall"
    events = read_events(files.events)[0]
    start = [e for e in events if e["kind"] == "start"]
    assert len(start) == 1 and (start[0]["nproc"], start[0]["strategy"], start[0]["backend"]) == (2, "ddp", "gloo")
    steps = [e["step"] for e in events if e["kind"] == "step"]
    assert steps == sorted(set(steps)), "each step is logged once, by rank 0"
    assert sorted(p.name for p in files.ckpt.iterdir()) == [
        name for step in (8, 12, 16) for name in (f"step-{step:08d}.pt", f"step-{step:08d}.pt.sha256")
    ], "the newest three, each with its checksum"
    assert ranks[1]["last"] == ranks[0]["last"] == str(files.ckpt / "step-00000016.pt")
    assert RunStore().get(run.id).status == "running", "the launcher owns the status"

    single = model_like_the_script()
    single.load_state_dict(load_checkpoint(ranks[0]["last"])["model"])  # no "module." prefixes
    optimizer = torch.optim.AdamW(single.parameters(), 1e-2)
    middle = files.ckpt / "step-00000008.pt"
    x = torch.randn(64, 20)
    resumed = fit(
        single,
        optimizer,
        (x, (x[:, 0] > 0).long()),
        batch_size=16,
        loss_fn=nn.CrossEntropyLoss(),
        epochs=4,
        resume=str(middle),
    )
    assert resumed.status == "succeeded" and load_checkpoint(middle)["world_size"] == 2


def test_fast_path_shards_and_a_bare_torchrun_registers_a_ddp_run(tmp_path):
    finished = torchrun("fast", tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    first, second = (set(seen(tmp_path, r)["seen"]) for r in (0, 1))
    assert not first & second and first | second == set(range(256))
    (run,) = RunStore().list()
    assert (run.kind, run.nproc, run.status) == ("ddp", 2, "succeeded")


def test_fsdp_trains_and_saves_a_sharded_checkpoint_that_loads_in_one_process(tmp_path):
    finished = torchrun("fsdp", tmp_path)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rank0 = seen(tmp_path, 0)
    losses = [row["loss"] for row in rank0["history"] if row["loss"] is not None]
    assert rank0["status"] == "succeeded" and losses[-1] < 0.8 * losses[0]
    start = next(e for e in read_events(RunFiles.of(RunStore().list()[0].id).events)[0] if e["kind"] == "start")
    assert start["strategy"] == "fsdp"
    assert rank0["last"].endswith(".dcp") and rank0["last"] == seen(tmp_path, 1)["last"]
    state = load_checkpoint(rank0["last"])  # the shards put together in this process
    single = model_like_the_script()
    single.load_state_dict(state["model"])  # full tensors, not shards
    assert state["model"]["0.weight"].shape == (32, 20)


def test_a_rank_that_raises_is_the_message_the_user_sees(tmp_path):
    finished = torchrun("raise", tmp_path)
    assert finished.returncode != 0
    (error_file,) = (tmp_path / "logs").glob("*/attempt_0/1/error.json")
    assert json.loads(error_file.read_text())["message"]["message"] == "ValueError: boom on rank 1"
    assert "rank      : 1" in finished.stderr and "ValueError: boom on rank 1" in finished.stderr
    (run,) = RunStore().list()
    assert run.status == "failed" and run.error == "rank 1: ValueError: boom on rank 1"
    events = read_events(RunFiles.of(run.id).events)[0]
    assert {"kind": "error", "rank": 1, "message": "ValueError: boom on rank 1"}.items() <= next(
        e for e in events if e["kind"] == "error" and e["rank"] == 1
    ).items()
    assert events[-1]["kind"] == "end" and events[-1]["message"] == "rank 1: ValueError: boom on rank 1"


def test_a_fit_error_the_script_caught_gives_way_to_the_error_that_ends_the_rank(tmp_path):
    """Under a bare torchrun (no jiyu entry point) ``fit`` still writes the rank's error file at
    once; the script caught that error, so the exception that ended rank 1 later takes its place
    (fit's hook on ``sys.excepthook``), and torchrun's root cause is the true one."""
    finished = torchrun("caught", tmp_path)
    assert finished.returncode != 0
    (error_file,) = (tmp_path / "logs").glob("*/attempt_0/1/error.json")
    ending = "RuntimeError: the script's own error on rank 1, after fit"
    assert json.loads(error_file.read_text())["message"]["message"] == ending
    root_cause = finished.stderr[finished.stderr.index("Root Cause") :]
    assert "rank      : 1" in root_cause and ending in root_cause and "which the script catches" not in root_cause


def test_sigterm_to_torchrun_stops_every_rank_at_a_step_with_a_checkpoint(tmp_path):
    """What a launcher's stop does: SIGTERM to torchrun's process group. The ranks agree on a
    step at their next log, rank 0 saves a checkpoint, and everything exits."""
    environment = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(SCRIPT),
        "long",
        str(tmp_path),
    ]
    launcher = subprocess.Popen(
        command, env=environment, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        events = _wait_for_steps(launcher)
        signalled = time.monotonic()
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if launcher.poll() is None:
            _kill_tree(launcher.pid)
    end = read_events(events)[0][-1]
    assert end["kind"] == "end" and end["status"] == "stopped" and "by a stop request (SIGTERM)" in end["message"]
    assert load_checkpoint(RunFiles.of(RunStore().list()[0].id).ckpt / f"step-{end['step']:08d}.pt")
    assert took < 15
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]


def _wait_for_steps(launcher, steps: int = 20, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and launcher.poll() is None:
        for log in Path(os.environ["JIYU_HOME"]).glob("runs/*/events.jsonl"):
            if any(e["kind"] == "step" and e["step"] >= steps for e in read_events(log)[0]):
                return log
        time.sleep(0.2)
    raise AssertionError("the ranks never logged a step")
