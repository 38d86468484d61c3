"""The run page and Compare in a real JupyterLab in headless Chromium: reload mid-run and get
back to the live page, Stop from it, compare two runs, read it in the dark theme and in a
narrow window. Real background jobs (torchrun with gloo) feed them; only the GPUs go through
the NVML double (tests/nvml_double), as everywhere in the browser tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import expect

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles, store_path
from jiyu_magics.core.store.run_store import RunStore

from .lab_runner import wait_for_theme
from .test_lab_panel import PANEL, PYTHON3, browser, jobs, lab, status_of, wait_until  # noqa: F401 (fixtures)


def open_lab(browser, lab, width=1360, height=820, reset=True):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    load(page, lab, reset)
    return page


def load(page, lab, reset: bool) -> None:  # noqa: F811
    page.goto(lab.entry + ("&reset" if reset else ""))
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=90_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => true)")
    tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jiyu-panel"]')
    expect(tab).to_be_visible(timeout=90_000)
    if not page.locator(PANEL).is_visible():
        tab.click()
    expect(page.locator(PANEL)).to_be_visible()


def metric(page, name: str) -> str:
    return page.locator(".jp-JiyuRunPage-metric", has=page.locator(f"dt:text-is('{name}')")).locator("dd").inner_text()


def step_of(page) -> int:
    text = metric(page, "step")
    return int(text.split("/")[0]) if text[0].isdigit() else -1


def contrast(fg: str, bg: str) -> float:
    """WCAG contrast ratio of two computed CSS colours."""

    def lum(css):
        channels = [int(v) / 255 for v in re.findall(r"\d+", css)[:3]]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def composite(rgba: str, under: str) -> str:
    """A translucent colour over an opaque one, as the browser paints it."""
    values = [float(v) for v in re.findall(r"[\d.]+", rgba)]
    alpha = values[3] if len(values) > 3 else 1.0
    base = [float(v) for v in re.findall(r"[\d.]+", under)[:3]]
    mixed = [round(alpha * c + (1 - alpha) * b) for c, b in zip(values[:3], base, strict=False)]
    return f"rgb({mixed[0]}, {mixed[1]}, {mixed[2]})"


def test_reload_mid_run_then_open_shows_the_live_page_with_stop(browser, lab, jobs, artifacts):  # noqa: F811
    job = jobs(lab, "page-digits", steps=2000, pace=0.1)
    page = open_lab(browser, lab)
    row = page.locator(PANEL).locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    expect(row.locator(".jp-JiyuChip")).to_have_text("running", timeout=60_000)

    load(page, lab, reset=False)  # the reader reloads mid-run
    row = page.locator(PANEL).locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    row.get_by_role("button", name="Open the page of page-digits").click()
    body = page.locator(f'.jp-JiyuRunPage-body[data-run-id="{job.run_id}"]')
    expect(body).to_be_visible(timeout=30_000)
    expect(body.locator(".jp-JiyuChip")).to_have_text("running")
    first = wait_until(lambda: step_of(page), lambda s: s > 0, 90, "first step on the page")
    wait_until(lambda: step_of(page), lambda s: s > first, 30, "the page following the run")
    expect(body.locator('.jp-JiyuChart-series[data-label="train loss"] path.jp-JiyuChart-line')).to_have_count(1)
    expect(body.get_by_label("Parameters")).to_contain_text("pace")
    nproc = RunStore(store_path(lab.home)).get(job.run_id).nproc
    expect(body.get_by_label("Ranks").locator("li")).to_have_count(nproc)
    expect(body.get_by_label("Ranks").locator("li").first).to_have_text(re.compile(r"^rank 0: running · pid \d+$"))
    expect(page.locator(".jp-JiyuRunPage .jp-JiyuLog-text")).to_contain_text("torchrun started", timeout=30_000)
    page.screenshot(path=artifacts / "lab_run_page.png")

    load(page, lab, reset=False)  # the page itself survives a reload
    body = page.locator(f'.jp-JiyuRunPage-body[data-run-id="{job.run_id}"]')
    expect(body).to_be_visible(timeout=30_000)
    shown = wait_until(lambda: step_of(page), lambda s: s > 0, 30, "the restored page's step")
    wait_until(lambda: step_of(page), lambda s: s > shown, 30, "the restored page following the run")

    body.get_by_role("button", name="Stop page-digits").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop run").click()
    expect(body.locator(".jp-JiyuChip")).to_have_text("stopped", timeout=60_000)
    assert status_of(lab, job.run_id) == "stopped"
    resume = body.get_by_label("Checkpoints").locator("code", has_text="--resume")
    expect(resume.first).to_contain_text("--name page-digits", timeout=15_000)
    # the line form, as `jiyu show` and the stop's own message print it
    expect(resume.first).to_have_text(re.compile(r"^%train --resume \S+ --name page-digits$"))
    # the checkpoints listed are the ones on disk (--keep-ckpts removed the older), with how many went
    recorded = [e["path"] for e in read_events(RunFiles.of(job.run_id, home=lab.home).events)[0] if e["kind"] == "ckpt"]
    kept = [p for p in recorded if Path(p).exists()]
    count = f"{len(kept)} on disk" + (
        f" · {len(recorded) - len(kept)} older rotated out" if len(kept) < len(recorded) else ""
    )
    expect(body.get_by_label("Checkpoints")).to_contain_text(count)
    expect(body.locator(".jp-JiyuRunPage-ckpts tbody tr")).to_have_count(len(kept))
    body.get_by_label("Checkpoints").screenshot(path=artifacts / "lab_run_checkpoints.png")
    # a deliberate stop is a note, not a red error: short paths, a command that names the run
    note = body.locator(".jp-JiyuRun-note", has_text="by request")
    expect(note).to_contain_text("--name page-digits")
    expect(note).to_contain_text("…/ckpt/")
    assert str(lab.home) not in note.inner_text() and str(lab.home) in note.get_attribute("title")
    expect(body.locator(".jp-JiyuRun-detail")).to_have_count(0)
    panel_row = page.locator(PANEL).locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
    expect(panel_row.locator(".jp-JiyuRun-note")).to_contain_text("--name page-digits")
    expect(panel_row.locator(".jp-JiyuRun-detail")).to_have_count(0)
    expect(page.locator(".jp-JiyuRunPage .jp-JiyuLog-state")).to_contain_text("end of log", timeout=15_000)
    page.screenshot(path=artifacts / "lab_run_stopped.png")


def test_compare_two_runs_overlays_curves_and_marks_the_differing_parameter(browser, lab, jobs, artifacts):  # noqa: F811
    fast = jobs(lab, "cmp-digits", steps=40, pace=0.02)
    slow = jobs(lab, "cmp-digits", steps=60, pace=0.02)
    page = open_lab(browser, lab)
    panel = page.locator(PANEL)
    for job in (fast, slow):
        row = panel.locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]')
        expect(row.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=180_000)
        expect(row.locator(".jp-JiyuRun-params")).to_have_text(f"steps={40 if job is fast else 60}")
        # runs of one name told apart at a glance: short id and start time, beside what differs
        expect(row.locator(".jp-JiyuRun-id")).to_have_text(re.compile(rf"^{job.run_id[:6]} · \d\d:\d\d$"))
        row.get_by_role("checkbox").check()
    panel.get_by_role("button", name="Compare (2)").click()

    compare = page.locator(".jp-JiyuCompare")
    expect(compare.locator(".jp-JiyuChart-series path.jp-JiyuChart-line")).to_have_count(2, timeout=30_000)
    table = compare.get_by_label("Compared runs")
    # grouped, what differs first: the parameters cell's `steps` heads the table under its group
    expect(table.locator('tr[data-row="param.steps"]')).to_have_class(re.compile("jp-mod-differs"))
    expect(table.locator('tr[data-row="param.steps"] td')).to_have_text(["40", "60"])
    expect(table.locator("tbody tr").first).to_have_attribute("data-group", "parameters")
    expect(table.locator("tbody tr").nth(1)).to_have_attribute("data-row", "param.steps")
    groups = table.locator("tr.jp-JiyuCompare-group").evaluate_all("rows => rows.map(r => r.dataset.group)")
    assert groups[-1] == "metrics" and len(groups) == len(set(groups)), groups
    tracked_rows = table.locator("tr.jp-mod-param")
    expect(tracked_rows).not_to_have_count(0)
    assert all("jp-mod-differs" in c for c in tracked_rows.evaluate_all("rows => rows.map(r => r.className)"))
    # what is the same in both (pace, the model, the optimizer) and internal options: collapsed
    expect(table.locator('tr[data-row="param.pace"]')).to_have_count(0)
    same = compare.locator("details.jp-JiyuCompare-same")
    equal = same.get_by_label("Equal rows")
    expect(same.locator("summary")).to_have_text(re.compile(r"^\d+ equal rows$"))
    expect(equal).to_be_hidden()
    same.locator("summary").click()
    expect(equal).to_be_visible()
    expect(equal.locator('tr[data-row="param.pace"] td')).to_have_text(["0.02", "0.02"])
    expect(equal.locator('tr[data-row="model.class"] td')).to_have_text(["Sequential", "Sequential"])
    expect(equal.locator('tr[data-row="optimizer.lr"] td')).to_have_text(["0.003", "0.003"])
    expect(equal.locator('tr[data-row="option.keep_ckpts"]')).to_have_count(1)
    expect(same.locator("summary")).to_have_text(f"{equal.locator('tr[data-row]').count()} equal rows")
    compare.screenshot(path=artifacts / "lab_compare_grouped.png")
    same.locator("summary").click()
    expect(equal).to_be_hidden()
    assert metric_cells(table, "final loss")[0] != "n/a"
    compare.get_by_label("X axis").select_option("time")
    compare.get_by_label("Scale").select_option("linear")
    expect(compare.locator(".jp-JiyuChart-axis")).to_have_text("x: wall time (s) · y: linear")
    expect(compare.locator(".jp-JiyuChart-series path.jp-JiyuChart-line")).to_have_count(2)
    compare.get_by_label("X axis").select_option("step")
    compare.get_by_label("Scale").select_option("log")
    # the log axis labels decades and 1-2-5 sub-decades down where the losses end, not only near the start
    labels = compare.locator('.jp-JiyuChart-grid text.jp-JiyuChart-tick[text-anchor="end"]').all_text_contents()
    ticks = sorted(float(t) for t in labels)
    lowest = min(float(v) for v in metric_cells(table, "final loss"))
    assert len(ticks) >= 3 and ticks[0] <= lowest * 2.5, (ticks, lowest)
    page.screenshot(path=artifacts / "lab_compare.png")

    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false", timeout=30_000)
    wait_for_theme(page, ".jp-JiyuCompare", dark=True)
    page.screenshot(path=artifacts / "lab_compare_dark.png")
    background = compare.evaluate("n => getComputedStyle(n).backgroundColor")
    for selector, prop in (
        (".jp-JiyuChart-tick", "fill"),
        (".jp-JiyuChart-legend", "color"),
        (".jp-JiyuCompare-table td", "color"),
    ):
        color = compare.locator(selector).first.evaluate(f"n => getComputedStyle(n).{prop}")
        assert contrast(color, background) >= 4.5, (selector, color, background)
    differs = table.locator("tr.jp-mod-differs").first
    tint = composite(differs.evaluate("n => getComputedStyle(n).backgroundColor"), background)
    text = differs.locator("td").first.evaluate("n => getComputedStyle(n).color")
    assert contrast(text, tint) >= 4.5, ("a differing row", text, tint)
    grid = compare.locator(".jp-JiyuChart-grid line").first.evaluate("n => getComputedStyle(n).stroke")
    assert contrast(grid, background) < contrast(
        compare.locator(".jp-JiyuChart-tick").first.evaluate("n => getComputedStyle(n).fill"), background
    ), "gridlines stay fainter than the text"
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "true", timeout=30_000)

    narrow = open_lab(browser, lab, width=560, height=820)
    narrow.evaluate(f"window.jupyterapp.commands.execute('jiyu:open-run', {{id: '{slow.run_id}', name: 'cmp-digits'}})")
    narrow.evaluate("window.jupyterapp.commands.execute('application:toggle-left-area')")
    body = narrow.locator(f'.jp-JiyuRunPage-body[data-run-id="{slow.run_id}"]')
    expect(body.locator(".jp-JiyuChip")).to_have_text("succeeded", timeout=30_000)
    narrow.screenshot(path=artifacts / "lab_run_page_narrow.png")
    view = body.bounding_box()
    metrics = body.locator(".jp-JiyuRunPage-metric")
    assert metrics.count() == 7  # no eta once it ended, no validation rows for a run that validated nothing
    expect(body.get_by_label("Metrics")).not_to_contain_text("n/a")
    for i in range(metrics.count()):
        box = metrics.nth(i).bounding_box()
        assert (
            box
            and box["width"] > 0
            and box["x"] >= view["x"] - 1
            and box["x"] + box["width"] <= view["x"] + view["width"] + 1
        ), (i, box, view)
    assert (
        body.locator(".jp-JiyuRunPage-metrics").bounding_box()["y"]
        > body.locator(".jp-JiyuChart svg").first.bounding_box()["y"]
    ), "the metrics wrap under the chart"


def test_a_resumed_run_shows_its_parent_joined_and_links_back(browser, lab, jobs, artifacts):  # noqa: F811
    """`--resume last` from a finished run: the new run's page draws the parent's steps up to
    the checkpoint dimmed before its own, names the lineage with a link that opens the
    parent's page, its panel row names the parent, and Compare joins the curves the same way."""
    first = jobs(lab, "lineage-digits", steps=30, pace=0.02)
    wait_until(lambda: status_of(lab, first.run_id), lambda s: s == "succeeded", 180, "the first run")
    resumed = jobs(lab, "lineage-digits", steps=60, pace=0.02, train_options="--resume last")
    wait_until(lambda: status_of(lab, resumed.run_id), lambda s: s == "succeeded", 180, "the resumed run")
    start = next(e for e in read_events(RunFiles.of(resumed.run_id, home=lab.home).events)[0] if e["kind"] == "start")
    assert (start["parent_run"], start["parent_step"]) == (first.run_id, 30), start

    page = open_lab(browser, lab)
    page.evaluate(
        f"window.jupyterapp.commands.execute('jiyu:open-run', {{id: '{resumed.run_id}', name: 'lineage-digits'}})"
    )
    body = page.locator(f'.jp-JiyuRunPage-body[data-run-id="{resumed.run_id}"]')
    expect(body).to_be_visible(timeout=30_000)
    lineage = body.get_by_role("navigation", name="Lineage")
    expect(lineage).to_contain_text(f"Resumed from: lineage-digits ({first.run_id}) at step 30 → this run")
    parent_curve = body.locator(
        f'.jp-JiyuChart-series.jp-mod-dimmed[data-label="lineage-digits ({first.run_id}) before resume"]'
    )
    expect(parent_curve.locator("path.jp-JiyuChart-line")).to_have_count(1, timeout=30_000)
    expect(body.locator('.jp-JiyuChart-series[data-label="train loss"] path.jp-JiyuChart-line')).to_have_count(1)
    page.screenshot(path=artifacts / "lab_run_lineage.png")
    lineage.get_by_role("button", name=f"Open the page of lineage-digits ({first.run_id})").click()
    expect(page.locator(f'.jp-JiyuRunPage-body[data-run-id="{first.run_id}"]')).to_be_visible(timeout=30_000)
    expect(
        page.locator(f'.jp-JiyuRunPage-body[data-run-id="{first.run_id}"]').get_by_role("navigation", name="Lineage")
    ).to_have_count(0)

    panel = page.locator(PANEL)
    row = panel.locator(f'li.jp-JiyuRun[data-run-id="{resumed.run_id}"]')
    expect(row.locator(".jp-JiyuRun-lineage")).to_have_text(f"↳ resumed from {first.run_id[:6]} at 30")
    expect(panel.locator(f'li.jp-JiyuRun[data-run-id="{first.run_id}"] .jp-JiyuRun-lineage')).to_have_count(0)
    for job in (first, resumed):
        panel.locator(f'li.jp-JiyuRun[data-run-id="{job.run_id}"]').get_by_role("checkbox").check()
    panel.get_by_role("button", name="Compare (2)").click()
    compare = page.locator(".jp-JiyuCompare")
    joined = compare.locator(
        f'.jp-JiyuChart-series.jp-mod-dimmed[data-label="lineage-digits ({resumed.run_id}) ← {first.run_id}"]'
    )
    expect(joined.locator("path.jp-JiyuChart-line")).to_have_count(1, timeout=30_000)
    expect(compare.locator(".jp-JiyuChart-series.jp-mod-dimmed")).to_have_count(1)


def metric_cells(table, name: str) -> list[str]:
    return table.locator(f'tr[data-row="{name}"] td').all_inner_texts()


def test_submit_dialog_lists_the_parameters_and_keeps_a_refusal_in_the_dialog(browser, lab):  # noqa: F811
    cells = [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "execution_count": None,
            "outputs": [],
            "source": "lr = 0.1\nepochs: int = 2",
        },
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print(lr)"},
    ]
    (lab.root / "params.ipynb").write_text(
        json.dumps({"cells": cells, "metadata": PYTHON3, "nbformat": 4, "nbformat_minor": 5})
    )
    page = open_lab(browser, lab)
    page.evaluate("window.jupyterapp.commands.execute('docmanager:open', {path: 'params.ipynb'})")
    page.locator('.jp-NotebookPanel-toolbar [data-command="jiyu:submit-notebook"]').click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog.locator(".jp-JiyuSubmit-names")).to_have_text("The parameters cell sets: lr, epochs")
    dialog.get_by_label("Run name").fill("refused")
    dialog.get_by_label('Parameters, one "name = value" a line').fill("lr = 0.5\nepoch = 3")
    dialog.get_by_role("button", name="Submit").click()
    error = page.locator(".jp-Dialog .jp-JiyuSubmit-error")
    expect(error).to_contain_text("unknown parameter epoch", timeout=30_000)  # the server's 400, in the dialog
    expect(error).to_contain_text("(did you mean epochs?)")  # as the CLI answers a mistyped option
    expect(page.locator(".jp-Dialog").get_by_label("Run name")).to_have_value("refused")
    assert (
        page.locator(".jp-Dialog").get_by_label('Parameters, one "name = value" a line').input_value()
        == "lr = 0.5\nepoch = 3"
    ), "what was typed is kept"
    page.locator(".jp-Dialog").get_by_role("button", name="Cancel").click()
    expect(page.locator(".jp-Dialog")).to_have_count(0)
    assert all(r.name != "refused" for r in RunStore(store_path(lab.home)).list())
