"""GPU leases and the queue through the real entry points (``jiyu submit``, ``jobs.submit``,
``jiyu jobs --json``, ``jiyu queue``, ``jobs.stop``), on real detached supervisors, real torchrun
(gloo: this machine has no GPU), real SQLite and real processes killed with SIGKILL.

The GPUs come from the NVML test double (tests/nvml_double, the one fake: no driver here),
configured as a shared box of N identical GPUs whose process lists name real processes the test
started. What the ranks saw is read from their own rank files (``cuda_visible_devices``)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records as ranks

from .cli_runner import JIYU, jiyu
from .gpu_box import GIB, configure, uuid_of
from .jobs_workload import assert_no_processes, finished, wait_for, write_notebook

pytestmark = pytest.mark.usefixtures("torchrun_tmp")


@pytest.fixture
def box(nvml_double, tmp_path, monkeypatch):
    return lambda count: configure(monkeypatch, tmp_path, count)


def status(run_id: str) -> str:
    return RunStore().get(run_id).status


def running(run_id: str, timeout: float = 120.0):
    return wait_for(
        lambda: (lambda r: r if r.status == "running" else None)(RunStore().get(run_id)),
        timeout,
        what=f"run {run_id} running",
    )


def rank_devices(run_id: str, count: int, timeout: float = 120.0) -> list[str]:
    """What each rank saw in CUDA_VISIBLE_DEVICES, from its rank file, once all ``count`` wrote one."""
    records = wait_for(
        lambda: (lambda r: r if len(r) == count else None)(ranks.read_all(run_id)),
        timeout,
        what=f"{count} rank files of run {run_id}",
    )
    return [r.cuda_visible_devices for r in records]


def jobs_json(*extra: str) -> dict[str, dict]:
    done = jiyu("jobs", "--json", *extra)
    assert done.returncode == 0, done.stderr
    return {r["id"]: r for r in json.loads(done.stdout)}


def submit_cli(notebook, *args: str) -> str:
    done = jiyu("submit", str(notebook), *args, cwd=notebook.parent)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[2]


def test_three_jobs_of_two_gpus_on_four_gpus_two_run_on_disjoint_gpus_the_third_queues(box, tmp_path):
    box(4)
    nb = write_notebook(tmp_path / "train.ipynb")
    first = submit_cli(nb, "--nproc", "2", "--gpus", "2", "-p", "steps", "60", "-p", "step_seconds", "0.1")
    second = submit_cli(nb, "--nproc", "2", "--gpus", "2", "-p", "steps", "400", "-p", "step_seconds", "0.1")
    seen = {run: rank_devices(run, 2) for run in (first, second)}
    for devices in seen.values():
        assert len(set(devices)) == 1 and len(devices[0].split(",")) == 2, devices  # both ranks: the run's 2 GPUs
    first_gpus, second_gpus = (set(seen[r][0].split(",")) for r in (first, second))
    assert not first_gpus & second_gpus and first_gpus | second_gpus == {uuid_of(i) for i in range(4)}

    third = submit_cli(nb, "--nproc", "2", "--gpus", "2", "-p", "steps", "5")
    listed = jobs_json()
    assert listed[third]["status"] == "queued" and listed[third]["queue_position"] == 1
    assert listed[third]["gpus_requested"] == 2 and listed[third]["gpus"] == []
    for run, gpus in ((first, first_gpus), (second, second_gpus)):
        assert listed[run]["status"] == "running" and listed[run]["queue_position"] is None
        assert {g["uuid"] for g in listed[run]["gpus"]} == gpus and all(g["ended"] is None for g in listed[run]["gpus"])
        assert sorted(g["index"] for g in listed[run]["gpus"]) == sorted(int(u[-1]) for u in gpus)
    assert "queued #1" in jiyu("jobs").stdout

    done = finished(first, 240)
    assert done.status == "succeeded" and status(second) == "running"
    third_gpus = set(rank_devices(third, 2)[0].split(","))
    assert third_gpus == first_gpus  # the freed GPUs, never the second run's
    store = RunStore()
    freed = max(g["ended"] for g in store.get(first).gpus)
    assert store.get(third).started >= freed
    assert finished(third, 240).status == "succeeded"
    jobs.stop(second, grace=5)
    assert all(g["ended"] is not None for run in (first, second, third) for g in store.get(run).gpus)


def test_a_stopped_queued_run_never_starts(box, tmp_path):
    box(4)
    nb = write_notebook(tmp_path / "train.ipynb")
    holder = jobs.submit(nb, nproc=1, gpus=4, params={"steps": 400, "step_seconds": 0.1})
    running(holder.id)
    waiting = jobs.submit(nb, nproc=1, gpus=1, params={"steps": 3})
    waits(waiting.id)
    assert status(waiting.id) == "queued" and RunStore().get(waiting.id).queue_position == 1
    stopped = jobs.stop(waiting.id, grace=5)
    assert stopped.status == "stopped" and stopped.error == "stopped before it started" and stopped.started is None
    assert_no_processes(waiting.id)  # its supervisor is gone: nothing is left that could start it
    jobs.stop(holder.id, grace=5)
    after = RunStore().get(waiting.id)
    assert (after.status, after.started, after.gpus) == ("stopped", None, []) and ranks.read_all(waiting.id) == []
    assert "torchrun started" not in _log(waiting.id)
    assert_no_processes(waiting.id)


def waits(run_id: str) -> None:
    """Its supervisor has asked the queue and written why it waits (an event, not a pause)."""
    wait_for(lambda: "waiting for" in _log(run_id), 120, what=f"run {run_id}'s waiting line")


def _log(run_id: str) -> str:
    from jiyu_magics.core.runs.files import RunFiles

    path = RunFiles.of(run_id).log
    return path.read_text() if path.exists() else ""


TINY = "import time\ntime.sleep(0.3)\nprint('tiny job')"


def test_twenty_concurrent_submissions_never_double_lease(box, tmp_path):
    box(4)
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = tmp_path / "tiny.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(TINY)]), nb)
    procs = [
        subprocess.Popen(
            [str(JIYU), "submit", str(nb), "--gpus", "1", "--name", f"c{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs if err][:1]
    assert not any("locked" in out + err for out, err in outputs), "no submitter met a locked store"
    ids = [out.split()[2] for out, _ in outputs]
    assert len(set(ids)) == 20
    store = RunStore()
    assert {store.get(run_id).name for run_id in ids} == {f"c{i}" for i in range(20)}
    for run_id in ids:
        assert finished(run_id, 600).status == "succeeded"
        assert "[rank0]: tiny job" in RunFiles.of(run_id).log.read_text()
    leases = [(run_id, lease) for run_id in ids for lease in store.get(run_id).gpus]
    assert sorted(run_id for run_id, _ in leases) == sorted(ids)  # one GPU each
    for (a, one), (b, other) in itertools.combinations(leases, 2):  # every pair
        if one["uuid"] == other["uuid"]:
            assert one["ended"] <= other["since"] or other["ended"] <= one["since"], (a, one, b, other)
    for run_id, lease in leases:
        assert rank_devices(run_id, 1) == [lease["uuid"]]
    assert len({lease["uuid"] for _, lease in leases}) == 4  # the queue used every GPU


def test_a_foreign_process_above_the_threshold_keeps_jobs_off_its_gpu(box, tmp_path):
    gpus = box(2)
    other = subprocess.Popen(["sleep", "600"])  # someone else's training, as NVML lists it
    small = subprocess.Popen(["sleep", "600"])
    try:
        gpus.hold(0, other.pid, 2 * GIB)
        gpus.hold(1, small.pid, GIB // 2)  # below the 1 GiB default: GPU 1 stays free
        nb = write_notebook(tmp_path / "train.ipynb")
        first = jobs.submit(nb, nproc=1, gpus=1, params={"steps": 400, "step_seconds": 0.1})
        assert rank_devices(first.id, 1) == [uuid_of(1)]
        second = jobs.submit(nb, nproc=1, gpus=1, params={"steps": 3})
        waits(second.id)
        assert status(second.id) == "queued"  # GPU 0 is unleased but busy with a foreign process
        other.kill()
        other.wait()
        assert rank_devices(second.id, 1) == [uuid_of(0)]
        assert finished(second.id).status == "succeeded"
        jobs.stop(first.id, grace=5)
    finally:
        for proc in (other, small):
            proc.kill()
            proc.wait()


def test_the_busy_threshold_comes_from_the_environment(box, tmp_path, monkeypatch):
    gpus = box(1)
    other = subprocess.Popen(["sleep", "600"])
    try:
        gpus.hold(0, other.pid, 2 * GIB)
        monkeypatch.setenv("JIYU_GPU_BUSY_MIB", "4096")  # 2 GiB of foreign use is tolerated now
        run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), nproc=1, params={"steps": 3})
        assert run.gpus_requested == 1 and rank_devices(run.id, 1) == [uuid_of(0)]
        assert finished(run.id).status == "succeeded"
    finally:
        other.kill()
        other.wait()


KERNEL_LEASE = """
import os, torch
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.train.device_lease import record_device_lease
run = RunStore().create("kernel", "notebook-training", status="running", pid=os.getpid(),
                        pid_started=process_start_time(os.getpid()), notebook="/lab/holder.ipynb")
print(run.id, record_device_lease(run.id, torch.device("cuda", 0), os.environ.get("CUDA_VISIBLE_DEVICES")))
"""


@pytest.fixture
def kernel(tmp_path):
    """Starts a real IPython kernel (jupyter_client) with this test's environment as it is
    when called (the GPU box configured first)."""
    from jupyter_client.manager import start_new_kernel

    started = []

    def start():
        started.append(start_new_kernel(kernel_name="python3", cwd=str(tmp_path)))
        return started[-1]

    yield start
    for manager, client in started:
        client.stop_channels()
        if manager.is_alive():
            manager.shutdown_kernel(now=True)


def run_in(client, code: str) -> str:
    out = []
    reply = client.execute_interactive(
        code, timeout=120, output_hook=lambda m: out.append(m["content"].get("text", ""))
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def test_a_kernel_training_on_gpu_0_keeps_jobs_off_gpu_0_until_the_kernel_dies(box, tmp_path, kernel):
    """The kernel records its lease as an in-kernel %%train does on cuda:0 (record_device_lease,
    the call RunBinding makes: no CUDA here to train on); the jobs are real."""
    box(2)
    manager, client = kernel()
    kernel_run, said = run_in(client, KERNEL_LEASE).split()
    assert said == "None"  # nobody else held GPU 0
    lease = RunStore().get(kernel_run).gpus
    assert [(g["index"], g["ended"]) for g in lease] == [(0, None)]
    nb = write_notebook(tmp_path / "train.ipynb")
    first = jobs.submit(nb, nproc=1, params={"steps": 400, "step_seconds": 0.1})
    assert rank_devices(first.id, 1) == [uuid_of(1)]
    second = jobs.submit(nb, nproc=1, params={"steps": 3})
    waits(second.id)
    assert status(second.id) == "queued"
    os.kill(manager.provisioner.pid, signal.SIGKILL)  # the kernel dies without a word
    assert rank_devices(second.id, 1) == [uuid_of(0)]  # its lease ended with it: the queue moved on
    lost = RunStore().get(kernel_run)
    assert lost.status == "lost" and lost.gpus[0]["ended"] is not None
    assert finished(second.id).status == "succeeded"
    jobs.stop(first.id, grace=5)


def test_a_kernel_lease_on_a_leased_gpu_is_shared_and_says_who_holds_it(box, tmp_path, kernel):
    box(1)
    job = jobs.submit(write_notebook(tmp_path / "holder.ipynb"), nproc=1, params={"steps": 400, "step_seconds": 0.1})
    running(job.id)
    _, client = kernel()
    out = run_in(client, KERNEL_LEASE)
    kernel_run = out.split()[0]
    assert f"GPU 0 is leased by run holder ({job.id}, job, holder.ipynb); this training shares it" in out
    assert [g["shared"] for g in RunStore().get(kernel_run).gpus] == [True]
    jobs.stop(job.id, grace=5)


@pytest.mark.parametrize("victim", ["supervisor", "rank"])
def test_sigkill_of_a_runs_process_releases_its_lease_and_the_queue_moves_on(box, tmp_path, victim):
    box(1)
    nb = write_notebook(tmp_path / "train.ipynb")
    holder = jobs.submit(nb, nproc=1, params={"steps": 400, "step_seconds": 0.1})
    (record,) = wait_for(lambda: ranks.read_all(holder.id), what="the holder's rank")
    waiting = jobs.submit(nb, nproc=1, params={"steps": 3})
    waits(waiting.id)
    assert status(waiting.id) == "queued"
    os.kill(RunStore().get(holder.id).pid if victim == "supervisor" else record.pid, signal.SIGKILL)
    assert rank_devices(waiting.id, 1) == [uuid_of(0)]
    ended = RunStore().get(holder.id)
    assert ended.status == ("lost" if victim == "supervisor" else "failed")
    assert ended.gpus[0]["ended"] is not None and ended.gpus[0]["ended"] <= RunStore().get(waiting.id).started
    assert finished(waiting.id).status == "succeeded"
    assert_no_processes(holder.id, within=20)


def test_jiyu_queue_lists_the_order_and_top_moves_a_run_first(box, tmp_path):
    box(1)
    nb = write_notebook(tmp_path / "train.ipynb")
    holder = jobs.submit(nb, nproc=1, params={"steps": 400, "step_seconds": 0.1})
    running(holder.id)
    b = jobs.submit(nb, nproc=1, name="b", params={"steps": 3})
    c = jobs.submit(nb, nproc=1, name="c", params={"steps": 3})
    urgent = jobs.submit(nb, nproc=1, name="urgent", priority=5, params={"steps": 3})
    order = json.loads(jiyu("queue", "--json").stdout)
    assert [(q["name"], q["queue_position"]) for q in order] == [("urgent", 1), ("b", 2), ("c", 3)]
    moved = jiyu("queue", "--top", c.id[:5])
    assert moved.returncode == 0 and f"Run {c.id} (c) is now first in the queue." in moved.stdout
    text = jiyu("queue").stdout
    assert [line.split()[1] for line in text.splitlines()[2:]] == [c.id, urgent.id, b.id], text
    jobs.stop(holder.id, grace=5)
    first = running(c.id, 120)
    assert status(urgent.id) == "queued" and status(b.id) == "queued"
    assert finished(c.id).status == "succeeded"
    assert finished(b.id).status == "succeeded" and RunStore().get(b.id).started > RunStore().get(urgent.id).started
    assert first.started <= RunStore().get(urgent.id).started


def test_more_gpus_than_the_machine_has_is_refused_up_front(box, tmp_path):
    box(4)
    nb = write_notebook(tmp_path / "train.ipynb")
    done = jiyu("submit", str(nb), "--gpus", "5")
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        "jiyu submit: error: --gpus 5 is more than the 4 GPU(s) this machine has; it could never start"
    )
    done = jiyu("submit", str(nb), "--nproc", "2", "--gpus", "1")
    assert done.returncode == 2 and "each process drives a GPU of its own" in done.stderr
    assert RunStore().list() == []


def test_without_gpus_cpu_jobs_wait_for_a_slot_when_limited(tmp_path, monkeypatch):
    """No NVML double: this machine's real no-driver path, where jobs default to --gpus 0."""
    monkeypatch.setenv("JIYU_MAX_CPU_JOBS", "1")
    nb = write_notebook(tmp_path / "train.ipynb")
    first = jobs.submit(nb, nproc=1, params={"steps": 40, "step_seconds": 0.1})
    assert first.gpus_requested == 0
    second = jobs.submit(nb, nproc=1, params={"steps": 3})
    running(first.id)
    assert status(second.id) == "queued" and RunStore().get(second.id).queue_position == 1
    assert finished(first.id).status == "succeeded"
    assert finished(second.id).status == "succeeded"
    assert RunStore().get(second.id).started >= RunStore().get(first.id).ended
    assert rank_devices(second.id, 1) == [os.environ.get("CUDA_VISIBLE_DEVICES")]  # untouched: no GPU here


NPROC_DATA = """import torch
from torch.utils.data import DataLoader, TensorDataset
X = torch.randn(256, 8); y = X.sum(1, keepdim=True)
model = torch.nn.Linear(8, 1)"""
NPROC_BODY = """optimizer = torch.optim.SGD(model.parameters(), 0.05)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32)
loss_fn = torch.nn.MSELoss()"""


def test_train_nproc_waits_in_the_queue_runs_on_its_lease_and_an_interrupt_leaves_the_queue(box, tmp_path, ip, capsys):
    import threading

    box(1)
    holder = jobs.submit(write_notebook(tmp_path / "holder.ipynb"), nproc=1, params={"steps": 60, "step_seconds": 0.1})
    running(holder.id)
    ip.run_cell(NPROC_DATA, store_history=True)  # what a kernel runs is what %%train --nproc replays
    cell_output = sys.stdout  # capsys's buffer: the cell's lines as the user sees them

    def interrupt_once_queued():  # as a user's interrupt while the cell waits (not while its body runs)
        wait_for(
            lambda: [r for r in RunStore().list() if r.name == "waits-then-leaves" and r.status == "queued"],
            120,
            what="the cell's run queued",
        )
        # the run is queued before the cell says so: interrupt once the user could have read why
        wait_for(lambda: "waiting for 1 GPU(s)" in cell_output.getvalue(), 60, what="the cell's waiting line")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_queued, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("train", "--nproc 1 --epochs 1 --name waits-then-leaves", NPROC_BODY)
    assert "jiyu: queued at position 1, waiting for 1 GPU(s)" in capsys.readouterr().out
    (left,) = [r for r in RunStore().list() if r.name == "waits-then-leaves"]
    assert (left.status, left.error, left.started, left.gpus) == ("stopped", "stopped before it started", None, [])

    ip.run_cell_magic("train", "--nproc 1 --epochs 1 --name waits-then-runs", NPROC_BODY)  # until the holder ends
    (ran,) = [r for r in RunStore().list() if r.name == "waits-then-runs"]
    assert ran.status == "succeeded" and ip.user_ns["train_result"].status == "succeeded"
    assert [r.cuda_visible_devices for r in ranks.read_all(ran.id)] == [uuid_of(0)]
    assert ran.started >= RunStore().get(holder.id).gpus[0]["ended"]


def test_a_run_waiting_for_gpus_held_outside_jiyu_says_who_holds_them(box, tmp_path):
    """Issue 24, group 8: "waiting for 2 GPU(s)" alone sent the user hunting through nvidia-smi.
    The processes come from the NVML double's process lists (no driver here); they are real."""
    gpus = box(2)
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # someone's training
    other = subprocess.Popen(["sleep", "600"])
    try:
        gpus.hold(0, trainer.pid, 2 * GIB)
        gpus.hold(1, other.pid, 3 * GIB)
        waiting = submit_cli(write_notebook(tmp_path / "train.ipynb"), "--gpus", "2", "--nproc", "1")
        expected = (
            f"GPU 0 held by PID {trainer.pid} ({os.path.basename(psutil_name(trainer.pid))}, not a jiyu run); "
            f"GPU 1 held by PID {other.pid} (sleep, not a jiyu run)"
        )
        wait_for(lambda: expected in _log(waiting), 60, what="the waiting line naming the holders")
        assert f"queued at position 1, waiting for 2 GPU(s): {expected}" in _log(waiting)
        listing = jiyu("jobs")
        line = next(row for row in listing.stdout.splitlines() if row.startswith(waiting))
        assert f"queued #1 ({expected})" in line, listing.stdout
        trainer.kill()
        other.kill()
        running(waiting)
        assert RunStore().get(waiting).queue_reason is None, "the reason goes once the run starts"
        jobs.stop(waiting, grace=5)
    finally:
        for proc in (trainer, other):
            proc.kill()
            proc.wait()


def psutil_name(pid: int) -> str:
    import psutil

    return psutil.Process(pid).name()
