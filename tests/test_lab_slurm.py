"""The panel with runs on the real test Slurm (tests/slurm_cluster.py), in a real JupyterLab
driven through headless Chromium: a Slurm job training (progress, kind, where it runs), a second
one waiting in Slurm's queue with Slurm's reason, the panel's Stop withdrawing it, the first
one's log and its end. Screenshot: test-artifacts/lab_panel_slurm.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from jiyu_magics.core.runs.files import store_path
from jiyu_magics.core.store.run_store import RunStore

from .jobs_workload import assert_no_processes
from .lab_runner import jupyter_lab, submit_training_job
from .test_lab_panel import PANEL, browser, page, progress_of, wait_until  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slurm
ON_SLURM = ("--backend", "slurm", "--nproc", "2", "--gpus-per-node", "0")


@pytest.fixture(scope="module")
def lab(slurm_cluster, tmp_path_factory):
    """A JupyterLab whose server sees the test Slurm: the panel's polls follow its jobs."""
    with jupyter_lab(tmp_path_factory.mktemp("lab"), {"refreshInterval": 1}, env=slurm_cluster.env) as lab:
        yield lab
    slurm_cluster.cancel_all()


def test_the_panel_shows_slurm_runs_training_and_waiting_and_stops_one(
    page,  # noqa: F811 (the fixture)
    lab,
    slurm_cluster,
    artifacts,
    tmp_path,
):
    slurm_cluster.cancel_all()
    env = slurm_cluster.env
    training = submit_training_job(
        lab, "on-slurm", steps=100, pace=0.15, tmp=tmp_path, env=env, options=(*ON_SLURM, "--sbatch-arg=--exclusive")
    )  # the whole node
    waiting = submit_training_job(lab, "waits-on-slurm", steps=10, pace=0.1, tmp=tmp_path, env=env, options=ON_SLURM)
    store = RunStore(store_path(lab.home))
    panel = page.locator(PANEL)

    row = panel.locator(f'li.jp-JiyuRun[data-run-id="{training.run_id}"]')
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=60_000)
    kind = row.locator(".jp-JiyuRun-kind")
    expect(kind).to_have_text("slurm ×2")
    expect(kind).to_have_attribute("title", f"Slurm job {store.get(training.run_id).scheduler_id}")
    bar = row.get_by_role("progressbar", name="Progress of on-slurm")
    wait_until(lambda: progress_of(bar), lambda v: v is not None and v >= 10, 120, "progress on Slurm")

    queued = panel.locator(f'li.jp-JiyuRun[data-run-id="{waiting.run_id}"]')
    expect(queued.locator(".jp-JiyuChip")).to_have_text("queued")
    expect(queued.locator(".jp-JiyuRun-note")).to_have_text("waiting: Resources", timeout=30_000)
    row.get_by_role("button", name="Open the log of on-slurm").click()
    log = page.locator(".jp-JiyuLog-text")
    expect(log).to_contain_text("[rank0]: step", timeout=30_000)  # the job's own log, from the run folder
    page.screenshot(path=artifacts / "lab_panel_slurm.png")

    queued.get_by_role("button", name="Stop waits-on-slurm").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
    expect(queued.locator(".jp-JiyuChip")).to_have_text("stopped", timeout=60_000)
    assert store.get(waiting.run_id).error == "stopped before it started"
    assert waiting_job_gone(slurm_cluster, store.get(waiting.run_id).scheduler_id)

    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=180_000)
    expect(log).to_contain_text("slurm job succeeded", timeout=15_000)
    assert_no_processes(training.run_id)


def waiting_job_gone(slurm_cluster, job_id: str) -> bool:
    return job_id not in slurm_cluster.jobs()
