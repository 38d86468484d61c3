"""``images/monitoring/``: the shipped Prometheus config and alert rules checked by the real
``promtool`` (with a unit test per alert), the Grafana dashboard checked structurally against
what ``/jiyu/metrics`` exports, the Compose profile that provisions them, and a real
``prometheus`` scraping a real Jupyter server with jiyu (bearer token) while a short job runs.
GPUs come from the NVML test double (tests/nvml_double: the only fake, at the NVML boundary)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import yaml

from jiyu_magics.core.runs.model import RunKind
from jiyu_magics.core.store.leases import GpuSlot
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.launch_spec import LaunchSpec
from jiyu_magics.jobs.lifecycle import RunLifecycle

from .monitoring_tools import MONITORING, Prometheus, promtool, wait
from .server_fixtures import live_run, server_config, training_events
from .test_server_metrics import samples

TOKEN = "scrape-secret-0123"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "jiyu.json"
NAME = re.compile(r"\b(jiyu_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")


@pytest.fixture
def jp_base_url():
    return "/"  # Prometheus' metrics_path is a plain path


@pytest.fixture
def jp_server_config():
    return server_config(metrics_token=TOKEN, metrics_gpu_names="both")


def test_promtool_accepts_the_scrape_config_and_the_rules(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    config = (
        (MONITORING / "prometheus.yml").read_text().replace("/run/secrets/jiyu_metrics_token", str(tmp_path / "token"))
    )
    (tmp_path / "prometheus.yml").write_text(config)
    (tmp_path / "alerts.yml").write_text((MONITORING / "alerts.yml").read_text())
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0 and "SUCCESS: 4 rules found" in checked.stdout, checked.stdout + checked.stderr
    rules = promtool("check", "rules", "alerts.yml")
    assert rules.returncode == 0, rules.stdout + rules.stderr


def test_promtool_unit_tests_cover_every_alert():
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    tests = yaml.safe_load((MONITORING / "alerts_test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert alerts == tested == {"JiyuRunStalled", "JiyuGpuIdleWhileHeld", "JiyuGpuMemoryNearlyFull", "JiyuRunFailed"}
    done = promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_promtool_unit_tests_fail_when_an_alert_is_wrong(tmp_path):
    """The unit tests can fail: with the stall alert's expression inverted, they do."""
    (tmp_path / "alerts.yml").write_text(
        (MONITORING / "alerts.yml").read_text().replace("expr: jiyu_run_stalled == 1", "expr: jiyu_run_stalled == 0")
    )
    (tmp_path / "alerts_test.yml").write_text((MONITORING / "alerts_test.yml").read_text())
    done = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert done.returncode == 1 and "JiyuRunStalled" in done.stdout + done.stderr


async def exported_names(jp_fetch) -> set[str]:
    """Every sample name one scrape holds, with a stalled leased run and GPU time recorded."""
    run = live_run("exported")
    training_events(run)
    RunStore().mark_stalled(run.id, 1.0)
    RunStore().leases.record(run.id, GpuSlot("GPU-11111111-2222-3333-4444-555555555555", 0))
    text = (await jp_fetch("jiyu", "metrics", headers={"Authorization": f"Bearer {TOKEN}"})).body.decode()
    return set(samples(text))


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p.get("targets") for p in panels), "every panel queries something"
    return [target["expr"] for p in panels for target in p["targets"]]


async def test_every_dashboard_and_alert_query_names_an_exported_metric(nvml_double, jp_fetch):
    exported = await exported_names(jp_fetch)
    alerts = [
        rule["expr"]
        for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    ]
    for expr in dashboard_queries() + alerts:
        names = set(NAME.findall(expr))
        assert names, f"{expr!r} names no jiyu metric"
        assert names <= exported, f"{expr!r} names {sorted(names - exported)}, which /jiyu/metrics does not export"
    dashboard = json.loads(DASHBOARD.read_text())
    assert {t["datasource"]["uid"] for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]} == {
        "jiyu-prometheus"
    }
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    assert all(word in titles for word in ("gpu", "runs", "queue", "stalled"))


def test_the_compose_profile_provisions_prometheus_and_grafana_from_these_files():
    compose = yaml.safe_load((MONITORING.parent / "compose.yaml").read_text())
    services = compose["services"]
    assert services["prometheus"]["profiles"] == services["grafana"]["profiles"] == ["monitoring"]
    assert "profiles" not in services["lab"], "the lab starts without the profile"
    for service in ("prometheus", "grafana"):
        for mount in services[service]["volumes"]:
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (MONITORING.parent / source).exists(), f"{service} mounts {source}, which is not shipped"
    assert "JIYU_METRICS_TOKEN" in services["lab"]["environment"]
    assert services["prometheus"]["secrets"] == ["jiyu_metrics_token"]
    datasource = yaml.safe_load((MONITORING / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert datasource["datasources"][0]["uid"] == "jiyu-prometheus"


ONE_RANK_FIT = """
import torch
from jiyu_magics.train.engine import fit
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
fit(model, torch.optim.SGD(model.parameters(), lr=0.1), (torch.randn(256, 4), torch.randn(256, 1)),
    loss_fn=torch.nn.functional.mse_loss, batch_size=8, max_steps=24, log_every=4, save_ckpts=False)
"""


def run_short_job() -> str:
    lifecycle = RunLifecycle.register(RunKind.DDP, "scraped", LaunchSpec(nproc=1), owner="test")
    lifecycle.files.script.write_text(ONE_RANK_FIT)
    with lifecycle:
        lifecycle.start()
        lifecycle.wait()
        assert lifecycle.end().status == "succeeded"
    return lifecycle.run_id


async def test_a_real_prometheus_scrapes_the_run_and_the_gpus(
    nvml_double, jp_fetch, jp_http_port, tmp_path, torchrun_tmp, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{jp_http_port}", "/jiyu/metrics", TOKEN)
    try:
        await asyncio.to_thread(wait, prometheus.ready, 60, "prometheus to be ready")
        run_id = await asyncio.to_thread(run_short_job)

        def step_seen():
            return prometheus.query(f'jiyu_run_step{{run_id="{run_id}"}}')

        (step,) = await asyncio.to_thread(wait, step_seen, 60, "the run's step in Prometheus")
        assert step["metric"]["run_name"] == "scraped" and step["metric"]["job"] == "jiyu"
        assert float(step["value"][1]) == 24
        target = (await asyncio.to_thread(prometheus.api, "targets"))["activeTargets"][0]
        assert target["health"] == "up", target
        memory = await asyncio.to_thread(prometheus.query, "jiyu_gpu_memory_total_bytes")
        assert sorted((m["metric"]["gpu"], float(m["value"][1])) for m in memory) == [
            ("0", 80 * 2**30),
            ("1", 16 * 2**30),
        ]
        dcgm = await asyncio.to_thread(prometheus.query, 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}')
        assert float(dcgm[0]["value"][1]) == 45

        def ended_seen():
            found = prometheus.query(f'jiyu_run_info{{run_id="{run_id}", status="succeeded"}}')
            return found and prometheus.query(f'jiyu_run_info{{run_id="{run_id}"}}')

        (status,) = await asyncio.to_thread(wait, ended_seen, 30, "the run's end in Prometheus")
        assert status["metric"]["status"] == "succeeded", "the series of its earlier status went stale"
    finally:
        prometheus.stop()
