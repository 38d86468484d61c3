"""Notebook 7 (installed with the test extras) in headless Chromium: the panel opens from the
notebook's toolbar and from the View menu (not only View → Left Sidebar), and Logs of a run
opens its log under the notebook (Notebook 7's main area holds one document only). A real
background job feeds it; the GPUs come from the NVML double, as in every browser test."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .lab_runner import jupyter_lab, painted, submit_training_job, training_notebook
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
    painted(page)
    assert log.bounding_box()["height"] > 150, "the log has room to be read, not a bare tab"
    page.screenshot(path=artifacts / "notebook7_panel_logs.png")

    page.evaluate("window.jupyterapp.shell.collapseLeft()")
    expect(panel).to_be_hidden()
    page.locator(".lm-MenuBar-item", has_text="View").click()
    page.locator(".lm-Menu-item", has_text="Show GPUs and runs").click()
    expect(panel).to_be_visible(timeout=10_000)
    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=120_000)


def test_notebook7_brings_every_view_it_opens_to_the_front(browser, notebook7, tmp_path, artifacts):  # noqa: F811
    """Notebook 7 holds one document in its main area: run pages, logs and Compare open in the
    tab panel below the notebook, and each one opened (not only the first) becomes its visible
    tab; Compare shows the comparison and keeps the ticks."""
    from .notebook_runner import execute, notebook, text_of

    cell = (
        "%%train --max-steps 20 --seed {seed} --name nb7-small\n"
        "model = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), 0.1)\n"
        "train_loader = torch.utils.data.DataLoader(data, batch_size=16)\n"
        "train_step = lambda model, batch: torch.nn.functional.cross_entropy(model(batch[0]), batch[1])"
    )
    nb = notebook(
        "%load_ext jiyu_magics",
        "import torch\nx = torch.randn(256, 4)\ndata = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())",
        "seed = 1",
        cell,
        "a = train_result.run_id\nseed = 2",
        cell,
        "print(a, train_result.run_id)",
    )
    with pytest.MonkeyPatch.context() as patch:  # two in-kernel runs in the server's run store
        patch.setenv("JIYU_HOME", str(notebook7.home))
        first, second = text_of(execute(nb, tmp_path).cells[6]).split()
    path = training_notebook(notebook7.root, "nb7-views")
    page = browser.new_context(viewport={"width": 1280, "height": 820}).new_page()
    page.goto(f"{notebook7.url}notebooks/{path.name}?token={notebook7.token}")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    page.locator('.jp-NotebookPanel-toolbar [data-command="jiyu:show-panel"]').click()
    panel = page.locator(PANEL)
    rows = {run_id: panel.locator(f'li.jp-JiyuRun[data-run-id="{run_id}"]') for run_id in (first, second)}
    for row in rows.values():
        expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=60_000)
    opened = [  # each click shows its view, and hides the one shown before
        (rows[first].get_by_role("button", name="Open the page of nb7-small"), f"#jiyu-run-area-{first}"),
        (rows[second].get_by_role("button", name="Open the page of nb7-small"), f"#jiyu-run-area-{second}"),
        (rows[first].get_by_role("button", name="Open the log of nb7-small"), f"#jiyu-log-area-{first}"),
        (rows[first].get_by_role("button", name="Open the page of nb7-small"), f"#jiyu-run-area-{first}"),
    ]
    shown_before = None
    for button, view in opened:
        button.click()
        expect(page.locator(view)).to_be_visible(timeout=15_000)
        if shown_before is not None:
            expect(page.locator(shown_before)).to_be_hidden()
        shown_before = view
    rows[first].get_by_role("checkbox").check()
    rows[second].get_by_role("checkbox").check()
    panel.get_by_role("button", name="Compare (2)").click()
    compare = page.locator(f"#jiyu-compare-area-{first}-{second}")
    expect(compare).to_be_visible(timeout=15_000)
    expect(compare.locator(".jp-JiyuChart-series path.jp-JiyuChart-line")).to_have_count(2, timeout=30_000)
    expect(page.locator(f"#jiyu-run-area-{first}")).to_be_hidden()
    expect(rows[first].get_by_role("checkbox")).to_be_checked()  # the ticks stay
    expect(panel.get_by_role("button", name="Compare (2)")).to_be_visible()
    page.screenshot(path=artifacts / "notebook7_compare.png")
