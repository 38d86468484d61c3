"""``/jiyu/metrics`` read back with prometheus_client's own parser, through a real server."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.server import metrics

from .server_fixtures import live_run, server_config, training_events


def samples(text: str) -> dict[str, list]:
    """Samples by name, as a scraper would store them."""
    found: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def value(found: dict, metric: str, **labels) -> float:
    matching = [s.value for s in found[metric] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (metric, labels, found.get(metric))
    return matching[0]


async def test_gpus_and_runs_parse_as_prometheus_text(nvml_double, jp_fetch):
    run = live_run("mlp")
    training_events(run, steps=5, total=20)
    old = RunStore().create("job", "failed-long-ago", status="running", pid=1)
    RunStore().finish(old.id, "failed", exit_code=1)
    RunStore().update(old.id, ended=time.time() - 2 * metrics.RECENT_S)
    response = await jp_fetch("jiyu", "metrics")
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    found = samples(response.body.decode())
    assert value(found, "jiyu_nvml_up") == 1
    assert value(found, "jiyu_gpu_utilization_ratio", gpu="0") == pytest.approx(0.45)
    assert value(found, "jiyu_gpu_memory_total_bytes", gpu="0") == 80 * 2**30
    assert value(found, "jiyu_gpu_power_watts", gpu="0") == 250
    assert value(found, "jiyu_gpu_temperature_celsius", gpu="0") == 54
    assert value(found, "jiyu_gpu_info", gpu="1", name="Tesla T4") == 1
    assert [s.labels["gpu"] for s in found["jiyu_gpu_utilization_ratio"]] == ["0"]  # T4: not supported, no sample
    labels = {"run_id": run.id, "run_name": "mlp", "kind": "job"}
    assert value(found, "jiyu_run_status", **labels, jiyu_run_status="running") == 1
    assert value(found, "jiyu_run_status", **labels, jiyu_run_status="failed") == 0
    assert value(found, "jiyu_run_step", **labels) == 5
    assert value(found, "jiyu_run_progress_ratio", **labels) == 0.25
    assert value(found, "jiyu_run_loss", **labels) == pytest.approx(0.4)
    assert value(found, "jiyu_run_samples_per_second", **labels) == 505
    assert value(found, "jiyu_runs", status="running") == 1
    assert value(found, "jiyu_runs", status="failed") == 1
    assert all(s.labels.get("run_name") != "failed-long-ago" for s in found["jiyu_run_status"])


async def test_a_scrape_does_not_call_lost_a_run_whose_owner_lives(jp_fetch):
    """The moment between torchrun's exit and its kernel recording the end of a ``%%train
    --nproc`` run (the kernel: this process, the run's owner): running, not lost."""
    torchrun = subprocess.Popen([sys.executable, "-c", "pass"])
    torchrun.wait()
    run = live_run("owned", kind="ddp")
    RunStore().update(run.id, pid=torchrun.pid, pid_started=None, owner_pid=run.pid, owner_started=run.pid_started)
    found = samples((await jp_fetch("jiyu", "metrics")).body.decode())
    assert value(found, "jiyu_run_status", run_id=run.id, jiyu_run_status="running") == 1
    assert value(found, "jiyu_runs", status="running") == 1
    assert all(s.value == 0 for s in found["jiyu_runs"] if s.labels["status"] == "lost")
    listed = json.loads((await jp_fetch("jiyu", "api", "runs")).body)
    assert [(r["id"], r["status"]) for r in listed["runs"]] == [(run.id, "running")]
    assert "owner_pid" not in listed["runs"][0], "the owner stays the store's business"


@pytest.mark.driverless
async def test_without_a_driver_nvml_is_down_and_no_gpu_series_exist(jp_fetch):
    found = samples((await jp_fetch("jiyu", "metrics")).body.decode())
    assert value(found, "jiyu_nvml_up") == 0
    assert "jiyu_gpu_utilization_ratio" not in found


@pytest.mark.parametrize("jp_server_config", [server_config(metrics_token="scrape-secret")])
async def test_a_scraper_token_opens_metrics_and_nothing_else(jp_fetch):
    bearer = {"Authorization": "Bearer scrape-secret"}
    response = await jp_fetch("jiyu", "metrics", headers=dict(bearer))
    assert response.code == 200 and b"jiyu_nvml_up" in response.body
    for headers in (
        {"Authorization": "Bearer wrong"},
        {"Authorization": ""},
        {"Authorization": "Bearer scrape-sécret"},
    ):
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("jiyu", "metrics", headers=headers)
        assert refused.value.code == 403
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("jiyu", "api", "runs", headers=dict(bearer))
    assert refused.value.code == 403


async def test_without_a_scraper_token_bearer_headers_are_refused(jp_fetch):
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("jiyu", "metrics", headers={"Authorization": "Bearer "})
    assert refused.value.code == 403


def test_only_active_and_recently_finished_runs_get_series():
    now = time.time()
    runs = [
        {"id": "a", "status": "running", "ended": None},
        {"id": "b", "status": "succeeded", "ended": now - 60},
        {"id": "c", "status": "failed", "ended": now - 2 * metrics.RECENT_S},
    ]
    assert [r["id"] for r in metrics.recent(runs, now)] == ["a", "b"]


H100 = "GPU-11111111-2222-3333-4444-555555555555"


async def test_a_stalled_run_its_last_step_time_its_lease_and_gpu_seconds(nvml_double, jp_fetch):
    from jiyu_magics import __version__
    from jiyu_magics.core.events.log import read_events
    from jiyu_magics.core.runs.files import RunFiles
    from jiyu_magics.core.store.leases import GpuSlot

    stuck, fine = live_run("stuck"), live_run("fine")
    for run in (stuck, fine):
        training_events(run, steps=5, total=20)
    step_at = read_events(RunFiles.of(stuck.id).events)[0][-2]["t"]  # the step event of step 5
    RunStore().mark_stalled(stuck.id, step_at)
    RunStore().leases.record(stuck.id, GpuSlot(H100, 0))
    with RunStore().db.write() as db:
        db.execute(
            "INSERT INTO gpu_usage (hour, uuid, owner, run_id, held_s, idle_s) VALUES (0, ?, 'run:x', 'x', 90, 30)",
            (H100,),
        )
    found = samples((await jp_fetch("jiyu", "metrics")).body.decode())
    assert value(found, "jiyu_info", version=__version__) == 1
    assert value(found, "jiyu_run_stalled", run_id=stuck.id, run_name="stuck") == 1
    assert value(found, "jiyu_run_stalled", run_id=fine.id, run_name="fine") == 0
    assert value(found, "jiyu_run_last_step_timestamp_seconds", run_id=stuck.id) == pytest.approx(step_at)
    assert value(found, "jiyu_run_info", run_id=stuck.id, status="running", kind="job") == 1
    assert value(found, "jiyu_run_gpus", run_id=stuck.id) == 1 and value(found, "jiyu_run_gpus", run_id=fine.id) == 0
    assert value(found, "jiyu_gpu_leases", gpu="0", uuid=H100) == 1 and value(found, "jiyu_gpu_leases", gpu="1") == 0
    assert value(found, "jiyu_gpu_lease_info", gpu="0", run_id=stuck.id, run_name="stuck") == 1
    assert value(found, "jiyu_gpu_held", gpu="0") == 1 and value(found, "jiyu_gpu_held", gpu="1") == 0
    assert value(found, "jiyu_gpu_held_seconds_total", gpu="0") == 90
    assert value(found, "jiyu_gpu_held_idle_seconds_total", gpu="0") == 30
    assert "DCGM_FI_DEV_GPU_UTIL" not in found, "DCGM names only when asked for"


@pytest.mark.parametrize("jp_server_config", [server_config(metrics_gpu_names="dcgm")])
async def test_dcgm_names_units_and_labels_as_a_setting(nvml_double, jp_fetch):
    import socket

    found = samples((await jp_fetch("jiyu", "metrics")).body.decode())
    labels = {
        "gpu": "0",
        "UUID": H100,
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": socket.gethostname(),
    }
    assert value(found, "DCGM_FI_DEV_GPU_UTIL", **labels) == 45  # percent, as dcgm-exporter
    assert value(found, "DCGM_FI_DEV_FB_USED", **labels) == 12 * 1024  # MiB
    assert value(found, "DCGM_FI_DEV_FB_FREE", gpu="0") == 68 * 1024
    assert value(found, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 250
    assert value(found, "DCGM_FI_DEV_FB_USED", gpu="1") == 1024  # the T4 reports memory only
    assert [s.labels["gpu"] for s in found["DCGM_FI_DEV_GPU_UTIL"]] == ["0"]
    assert "jiyu_gpu_utilization_ratio" not in found and value(found, "jiyu_gpu_held", gpu="0") == 0


def test_an_unknown_gpu_name_set_is_refused_in_one_line():
    from traitlets import TraitError

    from jiyu_magics.server.app import JiyuApp

    with pytest.raises(TraitError, match="metrics_gpu_names must be one of jiyu, dcgm, both; got 'nvidia'"):
        JiyuApp(metrics_gpu_names="nvidia")
