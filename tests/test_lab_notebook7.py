"""Notebook 7 (installed with the test extras) in headless Chromium: the panel opens from the
notebook's toolbar and from the View menu (not only View → Left Sidebar), and Logs of a run
opens its log under the notebook (Notebook 7's main area holds one document only). A real
background job feeds it; the GPUs come from the NVML double, as in every browser test."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .lab_runner import jupyter_lab, submit_training_job, training_notebook
from .test_lab_pages import browser  # noqa: F401 (the fixture)

PANEL = "#jiyu-panel"


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    with jupyter_lab(tmp_path_factory.mktemp("nb7"), {"refreshInterval": 1}, app="notebook") as server:
        yield server


def test_notebook7_opens_the_panel_from_the_toolbar_and_the_menu_and_logs_work(
    browser,  # noqa: F811 (the fixture)
    notebook7,
    tmp_path,
    artifacts,
):
    job = submit_training_job(notebook7, "nb7-digits", steps=40, pace=0.05, tmp=tmp_path)
    path = training_notebook(notebook7.root, "nb7-open")
    page = browser.new_context(viewport={"width": 1280, "height": 820}).new_page()
    page.goto(f"{notebook7.url}notebooks/{path.name}?token={notebook7.token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    button = page.locator('.jp-NotebookPanel-toolbar [data-command="jiyu:show-panel"]')
    expect(button).to_be_visible(timeout=60_000)
    expect(page.locator(PANEL)).to_be_hidden()
    button.click()
    panel = page.locator(PANEL)
    expect(panel).to_be_visible(timeout=10_000)
    row = panel.locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    expect(row).to_be_visible(timeout=60_000)
    row.get_by_role("button", name="Open the log of nb7-digits").click()
    log = page.locator(".jp-JiyuLog-text")
    expect(log).to_be_visible(timeout=15_000)
    expect(log).to_contain_text("torchrun started", timeout=60_000)
    expect(page.locator(".jp-NotebookPanel")).to_be_visible()  # the notebook stays, the log below it
    page.wait_for_timeout(300)
    assert log.bounding_box()["height"] > 150, "the log has room to be read, not a bare tab"
    page.screenshot(path=artifacts / "notebook7_panel_logs.png")

    page.evaluate("window.jupyterapp.shell.collapseLeft()")
    expect(panel).to_be_hidden()
    page.locator(".lm-MenuBar-item", has_text="View").click()
    page.locator(".lm-Menu-item", has_text="Show GPUs and runs").click()
    expect(panel).to_be_visible(timeout=10_000)
    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=120_000)
