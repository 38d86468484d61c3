"""GPU leases and the queue on a real GPU (run by benchmarks/gpu_checks.sh on the GPU machine;
skipped elsewhere): real NVML, real CUDA memory held by a real kernel, real jobs.

Two ``--gpus 1`` jobs on a one-GPU machine: the second waits until the first ends and sees the
same GPU. A kernel holding CUDA memory shows in ``jiyu gpu`` as a kernel owner and keeps a queued
job off the GPU until it is shut down. An in-kernel ``%%train`` on cuda:0 records a lease on it.
"""

from __future__ import annotations

import json
import time

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.gpu import snapshot as gpu
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records as ranks

from .cli_runner import jiyu
from .jobs_workload import finished, wait_for, write_notebook

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torchrun_tmp")]


def gpu0_uuid() -> str:
    snap = gpu.snapshot()
    assert snap.available and snap.devices, snap.reason
    return snap.devices[0].uuid


def test_two_one_gpu_jobs_on_one_gpu_the_second_waits_for_the_first(tmp_path):
    nb = write_notebook(tmp_path / "train.ipynb")
    first = jobs.submit(nb, nproc=1, gpus=1, params={"steps": 60, "step_seconds": 0.1})
    second = jobs.submit(nb, nproc=1, gpus=1, params={"steps": 3})
    (record,) = wait_for(lambda: ranks.read_all(first.id), 180, what="the first job's rank")
    assert record.cuda_visible_devices == gpu0_uuid()
    assert RunStore().get(second.id).status == "queued" and RunStore().get(second.id).queue_position == 1
    done = finished(first.id, 300)
    later = finished(second.id, 300)
    assert (done.status, later.status) == ("succeeded", "succeeded")
    assert later.started >= done.gpus[0]["ended"] and ranks.read_all(second.id)[0].cuda_visible_devices == gpu0_uuid()


HOLD_MEMORY = "import torch\nx = torch.ones(768, 1024, 1024, device='cuda')  # 3 GiB held by this kernel\nprint('held')"


def test_jiyu_gpu_names_a_kernel_holding_memory_which_keeps_a_job_waiting(tmp_path):
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        reply = client.execute_interactive(HOLD_MEMORY, timeout=180)
        assert reply["content"]["status"] == "ok"
        pid = manager.provisioner.pid
        snap = json.loads(jiyu("gpu", "--json").stdout)
        (proc,) = [p for p in snap["devices"][0]["processes"] if p["pid"] == pid]
        assert proc["owner"]["kind"] == "kernel" and proc["used_memory"] >= 3 * 2**30
        assert snap["devices"][0]["free"] is False
        assert f"kernel {proc['owner']['kernel_id'][:8]}" in jiyu("gpu").stdout
        job = jobs.submit(write_notebook(tmp_path / "train.ipynb"), nproc=1, gpus=1, params={"steps": 3})
        time.sleep(5.0)
        assert RunStore().get(job.id).status == "queued"  # 3 GiB of someone else's memory: busy
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert finished(job.id, 300).status == "succeeded"


def test_an_in_kernel_train_on_cuda_records_a_lease_on_its_gpu(ip):
    ip.run_cell(
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "data = TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))"
    )
    ip.run_cell_magic(
        "train",
        "--max-steps 30 --name leased-on-cuda --device cuda:0",
        "model = torch.nn.Linear(16, 4)\noptimizer = torch.optim.SGD(model.parameters(), 0.1)\n"
        "loss_fn = torch.nn.CrossEntropyLoss()\ntrain_loader = DataLoader(data, batch_size=32)",
    )
    (run,) = [r for r in RunStore().list() if r.name == "leased-on-cuda"]
    assert run.kind == "kernel" and run.status == "succeeded"
    (lease,) = run.gpus
    assert lease["uuid"] == gpu0_uuid() and lease["ended"] is not None and lease["ended"] >= lease["since"]
