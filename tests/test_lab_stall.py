"""A stalled run in the real JupyterLab panel (headless Chromium): a real 2-rank gloo run whose
rank 1 sleeps before a collective, followed by its lifecycle owner in this process, shows the
warning chip "no step for ..." beside running; its Stacks button shows both ranks' stacks
grouped; Stop ends it and nothing is left. Screenshot: test-artifacts/lab_panel_stall.png
(docs/img/ in the documentation)."""

from __future__ import annotations

import re
import threading

import pytest
from playwright.sync_api import expect

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import RunKind
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.launch_spec import LaunchSpec
from jiyu_magics.jobs.lifecycle import RunLifecycle

from . import test_lab_panel as panel_tests
from .jobs_workload import assert_no_processes, wait_for
from .stall_workload import SLEEP_LINE, stall_script

PANEL = panel_tests.PANEL
lab, browser, page = panel_tests.lab, panel_tests.browser, panel_tests.page  # the panel tests' Lab and Chromium

pytestmark = pytest.mark.usefixtures("torchrun_tmp")


@pytest.fixture
def stalled_run(lab, tmp_path, monkeypatch):
    """The run and its owner's follow loop on a thread, until the test stops it."""
    monkeypatch.setenv("JIYU_HOME", str(lab.home))
    monkeypatch.chdir(tmp_path)
    lifecycle = RunLifecycle.register(RunKind.DDP, "stuck-in-allreduce", LaunchSpec(nproc=2), owner="test")
    lifecycle.files.script.write_text(stall_script(timeout=3.0))
    lifecycle.stop_grace = 2.0
    assert lifecycle.start()
    lifecycle.follower = threading.Thread(target=lifecycle.wait, daemon=True)
    lifecycle.follower.start()
    yield lifecycle
    lifecycle.request_stop(grace=2.0)
    lifecycle.follower.join(60)
    lifecycle.end()


def test_the_panel_shows_a_stalled_run_and_its_stacks(page, stalled_run, artifacts):
    run_id = stalled_run.run_id
    wait_for(lambda: RunStore().get(run_id).stalled, 120, what="the stall flag")
    row = page.locator(f'{PANEL} [data-run-id="{run_id}"]')
    chip = row.locator(".jp-JiyuChip.jp-mod-stalled")
    expect(chip).to_be_visible(timeout=30_000)
    expect(chip).to_contain_text("no step for")
    expect(row.locator(".jp-JiyuChip.jp-mod-running")).to_be_visible()
    # at the default sidebar width, with Open, Logs, Stacks and Stop: the name keeps its room and
    # every button stays inside the panel (Open used to slide out of it, under the tab bar)
    expect(row.get_by_role("button", name="Show every rank's stack of stuck-in-allreduce")).to_be_visible()
    panel = page.locator(PANEL).bounding_box()
    assert row.locator(".jp-JiyuRun-name").bounding_box()["width"] > 40
    for button in row.locator(".jp-JiyuRun-actions button").all():
        box = button.bounding_box()
        assert panel["x"] <= box["x"] and box["x"] + box["width"] <= panel["x"] + panel["width"], (box, panel)
    row.screenshot(path=artifacts / "lab_panel_stalled_row.png")
    # the flag shows first; the dump (both ranks' stacks, then the stall event) follows within seconds
    wait_for(
        lambda: any(e["kind"] == "stall" for e in read_events(RunFiles.of(run_id).events)[0]),
        60,
        what="the stall's stack dump",
    )
    row.get_by_role("button", name="Show every rank's stack of stuck-in-allreduce").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text(f"rank 1 is in train_step (job.py:{SLEEP_LINE})", timeout=15_000)
    expect(dialog).to_contain_text("rank 0 is in")
    # folded as `jiyu stacks` prints it: the user's frames first; runpy, torchrun and jiyu a click away
    group = dialog.locator(".jp-JiyuStacks-group").first
    expect(group.locator(".jp-JiyuStacks-part").first).to_have_text("your code (outermost first):")
    folded = group.locator(".jp-JiyuStacks-folded")
    plumbing = re.compile(r"^\d+ frames? of jiyu, IPython, runpy and torchrun folded$")
    expect(folded.locator("summary")).to_have_text(plumbing)
    shown = "\n".join(dialog.locator(".jp-JiyuStacks-group > pre.jp-JiyuStacks-frames").all_inner_texts())
    assert "train_step" in shown and "runpy" not in shown and "jiyu_magics" not in shown, shown
    expect(folded.locator("pre")).to_be_hidden()
    page.screenshot(path=artifacts / "lab_panel_stall.png")
    dialog.get_by_role("button", name="Close").click()
    row.get_by_role("button", name="Stop stuck-in-allreduce").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
    stalled_run.follower.join(60)  # the owner sees its ranks end (the panel's stop ended them) and records it
    assert not stalled_run.follower.is_alive()
    assert stalled_run.end().status == "stopped" and RunStore().get(run_id).status == "stopped"
    assert_no_processes(run_id)
