"""Who holds what, in ``jiyu gpu`` and ``%gpu_status``, and the GPU time ``jiyu usage`` reports,
with real jobs (supervisors, torchrun, gloo ranks), real processes standing in for other people's
work, and the NVML test double (no driver here) listing those processes' pids per GPU."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from jiyu_magics import jobs
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process import rank_records as ranks

from .cli_runner import jiyu
from .gpu_box import GIB, configure
from .jobs_workload import finished, wait_for, write_notebook

pytestmark = pytest.mark.usefixtures("torchrun_tmp")


def pid_outside_this_container() -> int:
    """A pid nothing on this machine has (NVML in a container reports host pids like it)."""
    limit = int(open("/proc/sys/kernel/pid_max").read())
    return limit + 12345


@pytest.fixture
def training(nvml_double, tmp_path, monkeypatch):
    """Two double GPUs; a real job leasing GPU 0 whose rank NVML lists there, a foreign process
    on GPU 1, and a host pid on GPU 1."""
    box = configure(monkeypatch, tmp_path, 2)
    job = jobs.submit(
        write_notebook(tmp_path / "train.ipynb"), nproc=1, name="digits", params={"steps": 400, "step_seconds": 0.1}
    )
    (rank,) = wait_for(lambda: ranks.read_all(job.id), what="the job's rank")
    box.hold(0, rank.pid, 3 * GIB)
    other = subprocess.Popen(["sleep", "600"])
    box.hold(1, other.pid, 2 * GIB)
    box.hold_from_host(1, pid_outside_this_container(), GIB)
    yield job, other
    other.kill()
    other.wait()
    jobs.stop(job.id, grace=5)


def test_jiyu_gpu_shows_each_gpus_lease_and_the_owner_of_each_process(training):
    job, other = training
    text = jiyu("gpu").stdout
    held = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in text.split("Held by", 1)[1].splitlines()[2:4]}
    assert held["0"].startswith(f"run digits ({job.id}, job) · train.ipynb since {time.strftime('%H:')}")
    assert held["1"] == "busy: 3.0 GiB held by processes outside jiyu"  # 2 GiB foreign + 1 GiB from the host
    assert f"run digits ({job.id}, job) · train.ipynb" in text.split("Owner")[1]
    assert "other: sleep 600" in text and "pid outside this container" in text
    snap = json.loads(jiyu("gpu", "--json").stdout)
    gpu0, gpu1 = snap["devices"]
    assert [(lease["run_id"], lease["run_name"], lease["run_kind"]) for lease in gpu0["leases"]] == [
        (job.id, "digits", "job")
    ]
    assert gpu0["free"] is False and gpu0["foreign_memory"] == 0
    assert [p["owner"]["kind"] for p in gpu1["processes"]] == ["other", "outside"]
    assert gpu1["free"] is False and gpu1["leases"] == []


def test_gpu_status_magic_shows_the_same_owners(training, ip, capsys, monkeypatch):
    job, _ = training
    monkeypatch.setenv("JIYU_UI", "text")
    ip.run_line_magic("gpu_status", "")
    out = capsys.readouterr().out
    assert f"run digits ({job.id}, job)" in out and "busy: 3.0 GiB" in out and "pid outside this container" in out
    snap = ip.run_line_magic("gpu_status", "--json")
    assert snap["devices"][0]["leases"][0]["run_id"] == job.id


def test_jobs_lists_queued_runs_with_position_and_running_ones_with_gpus(training, tmp_path, ip, capsys, monkeypatch):
    job, _ = training
    waiting = jobs.submit(write_notebook(tmp_path / "next.ipynb"), nproc=1, params={"steps": 3})
    time.sleep(2.0)
    text = jiyu("jobs").stdout
    rows = {line.split()[0]: line for line in text.splitlines()[2:]}
    assert "running" in rows[job.id] and rows[job.id].split()[5] == "0"  # its GPU index
    assert "queued #1" in rows[waiting.id] and "1 wanted" in rows[waiting.id]
    monkeypatch.setenv("JIYU_UI", "text")
    ip.run_line_magic("jobs", "")
    assert "queued #1" in capsys.readouterr().out
    jobs.stop(waiting.id, grace=5)


def test_usage_reports_gpu_hours_and_idle_gpu_hours_of_a_job(nvml_double, tmp_path, monkeypatch):
    configure(monkeypatch, tmp_path, 1)  # 0% utilisation: all of its sampled time is idle
    job = jobs.submit(
        write_notebook(tmp_path / "train.ipynb"), nproc=1, name="idle-job", params={"steps": 140, "step_seconds": 0.1}
    )
    done = finished(job.id, 240)
    assert done.status == "succeeded"
    (lease,) = RunStore().get(job.id).gpus
    held = lease["ended"] - lease["since"]
    (row,) = json.loads(jiyu("usage", "--json").stdout)
    assert row["key"] == job.id and row["label"] == f"idle-job ({job.id}, job)" and row["runs"] == 1
    assert row["gpu_s"] == pytest.approx(held, abs=0.01)  # lease time x 1 GPU
    assert 0 < row["idle_s"] <= held  # sampled by the supervisor
    assert row["gpu_hours"] == pytest.approx(held / 3600, abs=1e-5)
    (by_notebook,) = json.loads(jiyu("usage", "--by", "notebook", "--json").stdout)
    assert by_notebook["key"] == str(tmp_path / "train.ipynb") and by_notebook["gpu_s"] == row["gpu_s"]
    (today,) = json.loads(jiyu("usage", "--by", "day", "--json").stdout)
    assert today["key"] == time.strftime("%Y-%m-%d") and today["idle_s"] == row["idle_s"]
    text = jiyu("usage", "--since", "1h").stdout
    assert f"idle-job ({job.id}, job)" in text and "total" in text
    bad = jiyu("usage", "--since", "yesterday")
    assert bad.returncode == 2 and "expected a span such as 7d" in bad.stderr
