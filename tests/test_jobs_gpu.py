"""Jobs on a real GPU (run by benchmarks/gpu_checks.sh on the GPU machine): a 1-rank NCCL
launch through the same launcher jobs and ``%%train --nproc`` use, and the --nproc check
against the GPUs NVML reports. Self-contained: the GPU machine has torch but no nbformat."""

from __future__ import annotations

import json

import pytest

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs import JobError, Launch
from jiyu_magics.jobs.launch_spec import check_fits_devices, visible_gpus

pytestmark = pytest.mark.gpu

NCCL_SCRIPT = """\
import json, os, torch, torch.distributed as dist
from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
x = torch.ones(4, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(x)
EventLog(RunFiles.of(os.environ["JIYU_RUN_ID"]).events).append(
    "step", step=1, loss=float(x.sum()), backend=dist.get_backend())
dist.destroy_process_group()
"""


def test_one_rank_nccl_launch_on_the_gpu(tmp_path, torchrun_tmp):
    script = tmp_path / "nccl_job.py"
    script.write_text(NCCL_SCRIPT)
    run = RunStore().create("ddp", "nccl", status="running")
    launch = Launch.start(script, nproc=1, run_id=run.id, cwd=tmp_path)
    assert launch.wait(300) == 0, RunFiles.of(run.id).log.read_text()[-2000:]
    (event,) = [json.loads(line) for line in RunFiles.of(run.id).events.read_text().splitlines()]
    assert event["backend"] == "nccl" and event["loss"] == 4.0
    assert [(r.rank, r.exit_code) for r in launch.ranks()] == [(0, 0)]


def test_more_processes_than_gpus_is_refused():
    gpus = visible_gpus()
    assert gpus and gpus >= 1
    check_fits_devices(gpus)
    with pytest.raises(JobError, match=f"more than the {gpus} GPU"):
        check_fits_devices(gpus + 1)
