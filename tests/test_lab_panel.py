"""The panel in a real JupyterLab, driven through headless Chromium (Playwright).

A real background job (a ``%%train`` notebook submitted with ``jiyu submit``) trains a small
torch model; the panel must show it appear and progress, its log must follow, Stop must ask
first, and both themes must render. A notebook opened in Lab trains with ``%%train`` and its
live dashboard widget renders and moves. Screenshots: test-artifacts/lab_*.png.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from jiyu_magics import jobs as jobs_api
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.run_row import UnknownRun
from jiyu_magics.core.store.run_store import RunStore

from .gpu_box import GpuBox
from .jobs_workload import assert_no_processes
from .lab_runner import (
    jupyter_lab,
    launch_chromium,
    painted,
    submit_training_job,
    training_notebook,
    wait_for_theme,
)

PANEL = "#jiyu-panel"
PYTHON3 = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The Lab, its GPUs two idle H100s of the NVML double's shared box (``lab.box``): no
    process of the test machine on the cards of the screenshots the documentation shows."""
    folder = tmp_path_factory.mktemp("lab")
    box = GpuBox(folder / "nvml_processes.json", 2)
    env = {"JIYU_NVML_DOUBLE_GPUS": "2", "JIYU_NVML_DOUBLE_PROCESSES": str(box.state)}
    with jupyter_lab(folder, {"refreshInterval": 1}, env=env) as lab:
        lab.box = box  # type: ignore[attr-defined]
        yield lab


@pytest.fixture
def browser():
    """Per test, so it starts after (and stops before) pytest-jupyter's autouse event loop:
    Playwright's sync API runs its own loop, which that fixture would otherwise adopt."""
    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, lab):
    context = browser.new_context(viewport={"width": 1360, "height": 820})
    page = context.new_page()
    page.goto(lab.entry + "&reset")  # a fresh layout: nothing restored from the previous test
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jiyu-panel"]')
    expect(tab).to_be_visible(timeout=90_000)
    tab.click()
    expect(page.locator(PANEL)).to_be_visible()
    yield page
    context.close()


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    started = []
    yield (
        lambda lab, name, **kw: (
            started.append((lab, submit_training_job(lab, name, tmp=tmp_path, **kw))) or started[-1][1]
        )
    )
    for lab, job in started:  # leave nothing running: stop what the test did not
        monkeypatch.setenv("JIYU_HOME", str(lab.home))
        try:
            jobs_api.stop(job.run_id, grace=10)
        except UnknownRun:
            pass


def status_of(lab, run_id: str) -> str:
    return RunStore(store_path(lab.home)).get(run_id).status


def wait_until(read, accept, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still {value!r} after {timeout:.0f} s")
        time.sleep(0.3)


def progress_of(bar) -> float | None:
    value = bar.get_attribute("aria-valuenow")
    return None if value is None else float(value)


def luminance(css_color: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", css_color)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_panel_follows_a_training_run_live(page, lab, jobs, artifacts):
    panel = page.locator(PANEL)
    lab.box.set_util(0, 45)
    expect(panel.locator(".jp-JiyuGpu")).to_have_count(2, timeout=30_000)
    expect(panel.get_by_role("progressbar", name="GPU 0 utilisation")).to_have_attribute("aria-valuenow", "45")
    lab.box.set_util(0, 0)  # the screenshots show idle cards: the jobs here train on the CPU

    job = jobs(lab, "digits-mlp", steps=120, pace=0.25)
    row = panel.locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    expect(row).to_be_visible(timeout=30_000)
    expect(row.locator(".jp-JiyuChip")).to_have_text("running")
    bar = row.get_by_role("progressbar", name="Progress of digits-mlp")
    first = wait_until(lambda: progress_of(bar), lambda v: v is not None and v > 0, 90, "first progress")
    later = wait_until(lambda: progress_of(bar), lambda v: v is not None and v > first, 20, "progress moving")
    assert 0 < first < later < 100
    points = row.locator(".jp-JiyuSparkline polyline").get_attribute("points")
    assert len(points.split()) >= 2, points

    row.get_by_role("button", name="Stop digits-mlp").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Stop digits-mlp?")
    page.screenshot(path=artifacts / "lab_panel_stop_dialog.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert status_of(lab, job.run_id) == "running"

    row.get_by_role("button", name="Open the log of digits-mlp").click()
    log = page.locator(".jp-JiyuLog-text")
    expect(log).to_contain_text("torchrun started")
    lines = len(log.inner_text().splitlines())
    wait_until(lambda: len(log.inner_text().splitlines()), lambda n: n > lines, 20, "log following")
    page.screenshot(path=artifacts / "lab_panel_light.png")
    light = panel.evaluate("node => getComputedStyle(node).backgroundColor")

    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
    wait_for_theme(page, PANEL, dark=True)
    page.screenshot(path=artifacts / "lab_panel_dark.png")
    dark = panel.evaluate("node => getComputedStyle(node).backgroundColor")
    assert luminance(light) > 0.8 and luminance(dark) < 0.3, (light, dark)
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=30_000)

    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=120_000)
    expect(bar).to_have_attribute("aria-valuenow", "100")
    expect(row.get_by_role("button", name="Stop digits-mlp")).to_have_count(0)
    expect(page.locator(".jp-JiyuLog-state")).to_contain_text("end of log", timeout=15_000)
    expect(log).to_contain_text("job succeeded")


def test_submit_command_is_in_the_notebook_toolbar_and_the_palette(page, lab, artifacts):
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {"tags": ["parameters"]},
                "execution_count": None,
                "outputs": [],
                "source": "lr = 0.1",
            }
        ],
        "metadata": PYTHON3,
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.root / "train.ipynb").write_text(json.dumps(notebook))
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'train.ipynb'})")
    button = page.locator('.jp-NotebookPanel-toolbar [data-command="jiyu:submit-notebook"]')
    expect(button).to_be_visible(timeout=30_000)
    button.click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Submit notebook as background job")
    expect(dialog.get_by_label("Processes per node (GPUs)")).to_have_value("2")  # one per GPU seen
    dialog.get_by_label('Parameters, one "name = value" a line').fill("lr = 3e-4\nepochs = 2")
    page.screenshot(path=artifacts / "lab_panel_submit_dialog.png")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert RunStore(store_path(lab.home)).list() == [] or all(
        r.notebook != str(lab.root / "train.ipynb") for r in RunStore(store_path(lab.home)).list()
    )

    page.keyboard.press("Control+Shift+C")
    palette = page.locator("#command-palette")
    palette.locator("input").fill("Submit notebook as")
    expect(palette.locator(".lm-CommandPalette-item", has_text="Submit notebook as background job")).to_be_visible()
    page.keyboard.press("Escape")


# -- the buttons that act: Stop and Submit go through jobs.stop / jobs.submit ----------------------


def test_stop_from_the_panel_stops_the_run(page, lab, jobs):
    job = jobs(lab, "to-stop", steps=2000, pace=0.1)
    row = page.locator(PANEL).locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=30_000)
    bar = row.get_by_role("progressbar", name="Progress of to-stop")
    wait_until(lambda: progress_of(bar), lambda v: v is not None and v > 0, 90, "training under way")
    row.get_by_role("button", name="Stop to-stop").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
    expect(row.locator(".jp-JiyuChip")).to_have_text("stopped", timeout=60_000)
    assert status_of(lab, job.run_id) == "stopped"
    assert_no_processes(job.run_id)
    events = read_events(Path(lab.home) / "runs" / job.run_id / "events.jsonl")[0]
    last_step = max(e["step"] for e in events if e["kind"] == "step")
    stopped = [e for e in events if e["kind"] == "end" and e.get("status") == "stopped"]
    assert stopped and any(e["kind"] == "ckpt" and e["step"] >= last_step for e in events), (
        "a stopped job keeps a checkpoint of the step it stopped at"
    )


def test_submit_from_the_toolbar_starts_a_job_the_panel_can_stop(page, lab, artifacts):
    """A job submitted from the notebook's toolbar; its log without the terminal colours it
    printed, and a second log beside the first, in its tab area, not squeezing the notebook."""
    cells = [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "execution_count": None,
            "outputs": [],
            "source": "n = 3",
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            # in colour, as tqdm, rich or a rank's IPython traceback write
            "source": (
                "import time\nfor i in range(n):\n    print('\\x1b[32mtick\\x1b[0m', i, flush=True)\n    time.sleep(1)"
            ),
        },
    ]
    (lab.root / "ticks.ipynb").write_text(
        json.dumps({"cells": cells, "metadata": PYTHON3, "nbformat": 4, "nbformat_minor": 5})
    )
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'ticks.ipynb'})")
    page.locator('.jp-NotebookPanel-toolbar [data-command="jiyu:submit-notebook"]').click()
    dialog = page.locator(".jp-Dialog")
    dialog.get_by_label("Processes per node (GPUs)").fill("1")
    dialog.get_by_label("Run name").fill("ticks-from-lab")
    dialog.get_by_label('Parameters, one "name = value" a line').fill("n = 600")
    dialog.get_by_role("button", name="Submit").click()
    row = page.locator(PANEL).locator("li.jp-JiyuRun", has_text="ticks-from-lab")
    expect(row).to_be_visible(timeout=30_000)
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=90_000)
    run = next(r for r in RunStore(store_path(lab.home)).list() if r.name == "ticks-from-lab")
    assert (run.kind, run.nproc, run.params) == ("job", 1, {"n": 600})
    row.get_by_role("button", name="Open the log of ticks-from-lab").click()
    log = page.locator("#jiyu-log-area-" + run.id).locator(".jp-JiyuLog-text")
    expect(log).to_contain_text("tick 1", timeout=60_000)
    assert "\x1b" not in log.inner_text() and "[32m" not in log.inner_text(), log.inner_text()
    earlier = RunStore(store_path(lab.home)).create("job", "earlier-run", status="running")
    RunStore(store_path(lab.home)).finish(earlier.id, "succeeded", exit_code=0)
    RunFiles.of(earlier.id, home=lab.home).create().log.write_text("an earlier run's log\n")
    page.evaluate(
        f"() => {{ window.jupyterapp.commands.execute('jiyu:open-log', {{id: '{earlier.id}', name: 'earlier-run'}}); }}"
    )
    expect(page.locator("#jiyu-log-area-" + earlier.id)).to_contain_text("an earlier run's log", timeout=15_000)
    tabs = page.locator(".lm-DockPanel-tabBar", has=page.get_by_text("Log: ticks-from-lab", exact=True))
    expect(tabs.get_by_text("Log: earlier-run", exact=True)).to_have_count(1)  # one tab area for both logs
    notebook, main = (
        page.locator(".jp-NotebookPanel").bounding_box(),
        page.locator("#jp-main-dock-panel").bounding_box(),
    )
    assert notebook["width"] > 0.4 * main["width"], (notebook, main)
    page.screenshot(path=artifacts / "lab_panel_two_logs.png")
    row.get_by_role("button", name="Stop ticks-from-lab").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
    expect(row.locator(".jp-JiyuChip")).to_have_text("stopped", timeout=60_000)


def test_train_dashboard_renders_live_in_a_lab_notebook(page, lab, artifacts):
    """%%train in a notebook opened in JupyterLab: the dashboard widget (ipywidgets in the real
    front-end) shows the loss curve and moving progress, the panel lists the kernel's run, and
    when training ends the widget is replaced by the static summary with the loss plot."""
    path = training_notebook(lab.root, "lab-digits")
    page.evaluate(f"window.jupyterapp.commands.execute('docmanager:open', {{path: '{path.name}'}})")
    expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(4, timeout=30_000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready.then(() => true)")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # not awaited
    output = page.locator(".jp-Notebook .jp-Cell").nth(3).locator(".jp-OutputArea-output")
    expect(output.locator("svg polyline").first).to_be_visible(timeout=120_000)
    bar = output.locator(".widget-hprogress .progress-bar").first
    label = output.locator(".widget-inline-hbox.widget-label").first  # the Label widget, not a description
    first = wait_until(
        label.inner_text, lambda t: t.startswith("step ") and not t.startswith("step 0/"), 60, "first logged step"
    )
    wait_until(
        label.inner_text,
        lambda t: t != first and int(t.split()[1].split("/")[0]) >= 40,
        40,
        "the progress label moving past step 40",
    )
    expect(output.get_by_role("button", name="Stop")).to_be_visible()
    expect(bar).to_be_visible()
    # what the status bar shows: the kernel's status as JupyterLab tracks it, Busy for the whole cell
    # (the dashboard's subshell request has a busy/idle pair of its own: kernel_status.py)
    status = page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status")
    assert status == "busy", f"the kernel's status while %%train runs: {status}"
    expect(output).to_contain_text("from the notebook: train_step (In [3])")
    row = page.locator(PANEL).locator("li.jp-JiyuRun", has_text="lab-digits")
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=30_000)
    page.screenshot(path=artifacts / "lab_train_dashboard.png")
    expect(output.locator(".jiyu-train-summary svg polyline").first).to_be_visible(timeout=180_000)  # themed SVG
    expect(output).to_contain_text("succeeded")
    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=30_000)
    run = next(r for r in RunStore(store_path(lab.home)).list() if r.name == "lab-digits")
    assert (run.kind, run.status) == ("kernel", "succeeded")
    summary_in_the_dark_theme_and_a_narrow_window(page, output, artifacts)


def summary_in_the_dark_theme_and_a_narrow_window(page, output, artifacts):
    """The end-of-run summary's chart takes the theme's colours (its text readable on the dark
    background, its gridlines fainter), and in a narrow output the numbers wrap under it."""
    from .test_lab_pages import contrast

    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
    wait_for_theme(page, ".jp-Notebook", dark=True)
    summary = output.locator(".jiyu-train-summary")
    summary.scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "lab_train_summary_dark.png")
    background = page.locator(".jp-Notebook").evaluate("n => getComputedStyle(n).backgroundColor")
    text = summary.locator("svg text").first.evaluate("n => getComputedStyle(n).fill")
    grid = summary.locator("svg line").first.evaluate("n => getComputedStyle(n).stroke")
    assert contrast(text, background) >= 4.5, (text, background)
    assert contrast(grid, background) < contrast(text, background), (grid, text, background)
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=30_000)
    wait_for_theme(page, ".jp-Notebook", dark=False)
    page.set_viewport_size({"width": 700, "height": 820})
    page.wait_for_function("() => window.innerWidth === 700")
    painted(page)  # Lumino lays its widgets out on the frame after the resize
    chart, table = summary.locator("svg").first.bounding_box(), summary.locator("table").bounding_box()
    assert table["y"] >= chart["y"] + chart["height"] - 1, "the numbers wrap under the chart"
    assert table["x"] + table["width"] <= summary.bounding_box()["x"] + summary.bounding_box()["width"] + 1


def test_a_ranks_pool_shows_in_the_panel_with_the_notebook_that_drives_it(page, lab, artifacts):
    """%ranks start in a notebook opened in JupyterLab: the panel lists the pool (kind ranks ×2,
    running, driven by that notebook) while its kernel holds it, and its end once stopped."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    path = lab.root / "lab-pool.ipynb"
    cells = ["%load_ext jiyu_magics", "%ranks start 2 --device cpu --name lab-pool", "%%ranks\nprint('pool ready')"]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells], metadata=PYTHON3), path)
    page.evaluate(f"window.jupyterapp.commands.execute('docmanager:open', {{path: '{path.name}'}})")
    expect(page.locator(".jp-Notebook .jp-Cell")).to_have_count(3, timeout=30_000)
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.ready.then(() => true)")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    expect(page.locator(".jp-Notebook .jp-Cell").nth(2)).to_contain_text("pool ready", timeout=180_000)
    row = page.locator(PANEL).locator("li.jp-JiyuRun", has_text="lab-pool")
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=30_000)
    expect(row.locator(".jp-JiyuRun-kind")).to_have_text("ranks ×2")
    expect(row.locator(".jp-JiyuRun-note")).to_have_text("driven by lab-pool.ipynb")
    row.scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "lab_panel_ranks.png")
    page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
        ".requestExecute({code: '%ranks stop'}).done.then(() => true)"
    )
    expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=60_000)
    (pool,) = [r for r in RunStore(store_path(lab.home)).list() if r.name == "lab-pool"]
    assert (pool.kind, pool.status) == ("ranks", "succeeded") and pool.notebook.endswith("lab-pool.ipynb")


def test_runs_of_one_name_show_what_differs_at_the_default_sidebar_width(page, lab, tmp_path, artifacts):
    """Two in-kernel runs of one name whose only difference is the lr their cell gives the
    optimizer (no parameters cell): the rows said nothing while Compare found it; and at the
    sidebar's default width a name of 20 characters was cut to 8 by the chip and the kind."""
    from .notebook_runner import execute, notebook

    name = "digits-baseline-sgd1"
    cell = (
        f"%%train --max-steps 4 --seed 0 --no-ckpt --name {name}\n"
        "model = torch.nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr={lr})\n"
        "train_loader = torch.utils.data.DataLoader(data, batch_size=16)\n"
        "train_step = lambda model, batch: torch.nn.functional.cross_entropy(model(batch[0]), batch[1])"
    )
    nb = notebook(
        "%load_ext jiyu_magics",
        "import torch\nx = torch.randn(64, 4)\ndata = torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())",
        cell.replace("{lr}", "0.1"),
        "first = train_result.run_id",
        cell.replace("{lr}", "0.05"),
    )
    with pytest.MonkeyPatch.context() as patch:  # in the Lab's run store
        patch.setenv("JIYU_HOME", str(lab.home))
        execute(nb, tmp_path)
    runs = [r for r in RunStore(store_path(lab.home)).list() if r.name == name]
    assert [r.params for r in runs] == [{}, {}], "nothing in the runs' parameters tells them apart"
    panel = page.locator(PANEL)
    for run, lr in zip(runs, ("0.05", "0.1"), strict=True):  # newest first
        row = panel.locator(f'li.jp-JiyuRun[data-run-id="{run.id}"]')
        expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=30_000)
        expect(row.locator(".jp-JiyuRun-params")).to_have_text(f"lr={lr}")
        title = row.locator(".jp-JiyuRun-name")
        expect(title).to_have_text(name)
        assert title.evaluate("n => n.scrollWidth <= n.clientWidth"), "the name is shown whole, not cut"
    assert panel.evaluate("n => n.scrollWidth <= n.clientWidth"), "nothing makes the panel scroll sideways"
    panel.locator(f'li.jp-JiyuRun[data-run-id="{runs[0].id}"]').screenshot(path=artifacts / "lab_panel_row.png")
