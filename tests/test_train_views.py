"""The training views from events alone: the state they fold, the SVG curve, the PNG, and a
dashboard/text progress tailing the event log of a run trained by another process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.views.loss_chart import RAW, SMOOTH, loss_svg
from jiyu_magics.views.loss_plot import render_loss_png
from jiyu_magics.views.train_text import progress_line, stat_rows, summary_html
from jiyu_magics.views.training_view import TrainingView
from jiyu_magics.widgets.event_follow import follow
from jiyu_magics.widgets.text_progress import TextProgress
from jiyu_magics.widgets.train_dashboard import TrainingDashboard

from .cli_runner import jiyu
from .conftest import ROOT

TRAINER = textwrap.dedent("""
    import torch
    from torch import nn
    from jiyu_magics.train import fit
    torch.manual_seed(0)
    x = torch.randn(1024, 20); y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
    fit(model, torch.optim.AdamW(model.parameters(), 1e-2), (x, y), batch_size=16, loss_fn=nn.CrossEntropyLoss(),
        val_data=(x[:256], y[:256]), epochs=3, log_interval_s=0.05)
""")


def _events():
    return [
        {
            "t": 1.0,
            "kind": "start",
            "run_id": "abc",
            "name": "net",
            "total_steps": 100,
            "epochs": 2,
            "nproc": 1,
            "batch_size": 32,
            "amp": "bf16",
            "device": "cuda:0",
            "params": 1000,
            "start_step": 0,
        },
        {
            "t": 2.0,
            "kind": "step",
            "step": 10,
            "epoch": 1,
            "loss": 2.0,
            "lr": 1e-3,
            "samples_per_s": 900.0,
            "mem_alloc": 2**30,
            "mem_reserved": 2 * 2**30,
            "mem_peak": 1.5 * 2**30,
            "eta": 90.0,
            "elapsed": 10.0,
        },
        {"t": 3.0, "kind": "step", "step": 50, "epoch": 1, "loss": 1.0, "lr": 1e-3, "samples_per_s": 1000.0},
        {"t": 3.5, "kind": "val", "step": 50, "epoch": 1, "loss": 1.2, "accuracy": 0.75},
        {"t": 3.6, "kind": "advice", "step": 50, "message": "The GPU waits for data 40% of the time."},
    ]


def test_view_folds_events_and_a_new_start_resets_it():
    view = TrainingView()
    assert view.feed(_events())
    assert (view.step, view.loss, view.val_acc, view.progress, view.eta) == (50, 1.0, 0.75, 0.5, 90.0)
    assert view.losses == [(10, 2.0), (50, 1.0)] and len(view.advice) == 1
    line = progress_line(view)
    assert line.startswith("step 50/100 (50%) · epoch 1/2 · loss 1 · val 1.2 / 75.0% · 1,000 samples/s")
    assert "mem peak 1.5 GiB" in line and "ETA 1:30" in line
    assert not view.feed([{"kind": "gpu"}, {"kind": "unknown"}])
    view.feed([{"kind": "start", "run_id": "abc", "total_steps": 10, "start_step": 100}])
    assert view.losses == [] and view.step == 100 and view.status == "running"


def test_the_dashboard_shows_validation_rows_only_for_a_run_that_validates():
    validating, silent = TrainingView(), TrainingView()
    validating.feed(_events())
    silent.feed([e for e in _events() if e["kind"] != "val"])
    assert [label for label, _ in stat_rows(validating)][:4] == ["epoch", "loss", "val loss", "val acc"]
    labels = [label for label, value in stat_rows(silent)]
    assert "val loss" not in labels and "val acc" not in labels, "no rows that could only say n/a"
    dashboard = TrainingDashboard(refresh=0.1)
    dashboard.render()
    stop = dashboard.stop_button.layout
    assert (stop.min_width, stop.flex) == ("90px", "0 0 auto"), "a narrow output cannot squeeze Stop to '◼ …'"


def test_smoothing_follows_the_trend_and_starts_at_the_first_value():
    view = TrainingView()
    view.feed([_events()[0]] + [{"kind": "step", "step": s, "loss": 1.0 if s % 2 else 3.0} for s in range(1, 101)])
    smooth = view.smoothed()
    assert smooth[0] == 1.0 and 1.6 < smooth[-1] < 2.4


def _spiky_view() -> TrainingView:
    """A loss at 0.01 with one step in ten spiking to 10: a log-scale chart (span 1000x)."""
    view = TrainingView()
    view.feed(
        _events()[:1] + [{"kind": "step", "step": s, "loss": 10.0 if s % 10 == 0 else 0.01} for s in range(1, 401)]
    )
    return view


def test_smoothing_on_a_log_chart_sits_on_the_curve_not_above_it():
    """The linear mean of a spiky loss is ~1 (100x the curve); in log space it stays near 0.01."""
    view = _spiky_view()
    assert view.smoothed()[-1] > 0.5
    assert 0.005 < view.smoothed(log=True)[-1] < 0.05
    import re

    svg = loss_svg(view)
    assert "log scale" in svg
    lines = re.findall(r"stroke='([^']+)' stroke-width='[\d.]+' points='([^']+)'", svg)
    raw = [float(p.split(",")[1]) for p in dict(lines)[RAW].split()]
    smooth_y = float(dict(lines)[SMOOTH].split()[-1].split(",")[1])
    floor_y = sorted(raw)[len(raw) // 2]  # the median point's height: the 0.01 floor
    assert abs(smooth_y - floor_y) < 0.25 * (max(raw) - min(raw)), (smooth_y, floor_y)


def test_svg_curve_has_train_smoothed_and_val_and_stays_small():
    view = TrainingView()
    view.feed(
        _events()[:1]
        + [{"kind": "step", "step": s, "loss": 100.0 / s} for s in range(1, 5001)]
        + [{"kind": "val", "step": 5000, "loss": 0.03, "accuracy": 0.9}]
    )
    svg = loss_svg(view)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and svg.count("<circle") == 1
    assert "log scale" in svg  # 100 -> 0.02 spans more than 30x
    assert len(svg) < 20_000, "thinned to a few hundred points however long the run"
    assert "waiting for the first logged step" in loss_svg(TrainingView())


def test_an_event_whose_step_is_not_known_draws_no_point():
    """``"step": null`` is valid ("not known"): the loss and val numbers still show, but a curve
    point needs its step (the chart once compared None with the steps and raised)."""
    view = TrainingView()
    view.feed(
        _events()[:3]
        + [{"kind": "step", "step": None, "loss": 0.5}, {"kind": "val", "step": None, "loss": 0.4, "accuracy": 0.8}]
    )
    assert view.losses == [(10, 2.0), (50, 1.0)] and view.vals == []
    assert (view.loss, view.val_loss) == (0.5, 0.4)
    svg = loss_svg(view)
    assert svg.count("<polyline") == 2 and "<circle" not in svg


def test_png_and_static_summary(artifacts):
    view = TrainingView()
    view.feed(_events() + [{"kind": "end", "status": "succeeded", "step": 100, "message": "Trained 100 steps."}])
    png = render_loss_png(view)
    assert png[:4] == b"\x89PNG"
    (artifacts / "train_loss_example.png").write_bytes(png)
    html = summary_html(view, "AAAA")
    assert "succeeded" in html and "Trained 100 steps." in html and "data:image/png;base64,AAAA" in html
    import base64

    page = summary_html(view, base64.b64encode(png).decode())
    (artifacts / "train_summary.html").write_text(f"<html><body style='font-family:sans-serif'>{page}</body></html>")


def _launch_trainer(run_id: str) -> subprocess.Popen:
    env = dict(os.environ, JIYU_RUN_ID=run_id, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", TRAINER], env=env, cwd=ROOT)


def test_dashboard_and_text_follow_another_process_run_to_its_end():
    run = RunStore().create("job", "tailed", status="running", pid=os.getpid())
    events = RunFiles.of(run.id).events
    trainer = _launch_trainer(run.id)
    try:
        dashboard = TrainingDashboard.from_events(events, refresh=0.1)
        text = TextProgress(interval=0.1, out=io.StringIO())
        dashboard.follow(events, until=lambda: trainer.poll() is not None)
        text_offset = follow(text, events)
        text.close()
    finally:
        trainer.wait(timeout=120)
    assert trainer.returncode == 0
    assert dashboard.view.status == "succeeded" and dashboard.view.step == 192
    assert dashboard.progress.value == 1.0 and "192/192" in dashboard.progress_label.value
    assert dashboard.renders >= 2 and dashboard.stop_button.disabled
    assert text_offset == events.stat().st_size
    printed = text.out.getvalue().splitlines()
    assert text.view.status == "succeeded" and printed[0].startswith(f"run {text.view.run_id} · ")
    assert printed[1].startswith("Trained 192 steps (3 epochs)"), printed


def test_dashboard_stop_button_in_follow_mode_calls_back():
    stopped = []
    dashboard = TrainingDashboard(refresh=0.1, on_stop=lambda: stopped.append(True))
    dashboard.render()
    dashboard.stop_button.click()
    assert stopped == [True] and dashboard.stop_button.disabled


def test_text_progress_prints_only_changes(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    for event in _events():
        log.append(event.pop("kind"), **{k: v for k, v in event.items() if k != "t"})
    log.append("end", status="stopped", step=50, message="Stopped at step 50/100.")
    out = io.StringIO()
    text = TextProgress(interval=0.01, out=out)
    follow(text, tmp_path / "events.jsonl")
    text.poll()
    text.close()
    assert out.getvalue().splitlines()[-1] == "Stopped at step 50/100."


def test_dashboard_snapshot_artifact(artifacts, tmp_path):
    """The dashboard's parts mid-run, laid out as the widget shows them, for people to look at
    (test-artifacts/train_dashboard.html, and .png when Chromium is installed)."""
    import shutil

    dashboard = TrainingDashboard(refresh=0.1)
    steps = [
        {
            "kind": "step",
            "step": s,
            "epoch": 1 + (s - 1) // 400,
            "loss": 2.3 * (0.93 ** (s / 20)) + 0.05 * (s % 7) / 7,
            "lr": 3e-4,
            "samples_per_s": 5120.0,
            "mem_alloc": 3 * 2**30,
            "mem_reserved": 4 * 2**30,
            "mem_peak": 3.5 * 2**30,
            "data_wait": 0.31,
            "eta": 42.0,
            "elapsed": 61.0,
        }
        for s in range(10, 1210, 10)
    ]
    vals = [
        {"kind": "val", "step": s, "epoch": s // 400, "loss": 2.3 * (0.93 ** (s / 20)) + 0.1, "accuracy": 0.9}
        for s in (400, 800, 1200)
    ]
    dashboard.feed([dict(_events()[0], total_steps=2000, epochs=5)] + steps + vals + [_events()[-1]])
    dashboard.view.gpu_util = 87
    dashboard.render()
    share = dashboard.progress.value
    page = (
        f"<html><body style='font-family:sans-serif;width:900px'>"
        f"<div><button>■ Stop</button> {dashboard.header.value}</div>"
        f"<div style='display:flex;gap:8px;align-items:center'><div style='width:50%;height:14px;background:#eee'>"
        f"<div style='width:{share:.0%};height:14px;background:#2196f3'></div></div>"
        f"{dashboard.progress_label.value}</div>"
        f"<div style='display:flex'>{dashboard.chart.value}{dashboard.stats.value}</div>{dashboard.notes.value}"
        f"</body></html>"
    )
    html_path = artifacts / "train_dashboard.html"
    html_path.write_text(page)
    assert "<svg" in page and "ETA 0:42" in page and "GPU util" in page and "waits for data" in page
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        png = artifacts / "train_dashboard.png"
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path}",
                f"--screenshot={png}",
                "--window-size=920,330",
                html_path.as_uri(),
            ],
            capture_output=True,
            timeout=60,
        )
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_text_progress_spaces_its_lines_by_its_own_clock():
    """A tailing caller polls every second; lines still come at most once per interval."""
    out = io.StringIO()
    text = TextProgress(interval=3600, out=out)
    text.feed([{"kind": "start", "total_steps": 100}])
    for step in range(1, 50):
        text.feed([{"kind": "step", "step": step, "loss": 1.0 / step}])
        text.poll()
    header, progress = out.getvalue().splitlines()  # the run's header as it starts, then one line
    assert text.lines == 2 and header.startswith("run n/a") and progress.startswith("step 1/100")


# -- the loss PNG: drawn by whoever shows the summary, never by the engine --------------------


def _finished_run(name: str = "plotted"):
    run = RunStore().create("job", name, status="running", pid=os.getpid())
    files = RunFiles.of(run.id).create()
    with EventLog(files.events) as log:
        for event in _events() + [{"kind": "end", "status": "succeeded", "step": 100, "message": "Trained."}]:
            fields = {k: v for k, v in event.items() if k not in ("t", "kind")}
            log.append(event["kind"], **(dict(fields, run_id=run.id) if event["kind"] == "start" else fields))
    return run, files


def test_text_progress_leaves_the_loss_png_in_the_run_folder_when_it_shows_the_end():
    run, files = _finished_run()
    text = TextProgress(interval=0.01, out=io.StringIO())
    follow(text, files.events)
    assert not files.loss_plot.exists()
    text.close()
    assert text.view.run_id == run.id and files.loss_plot.read_bytes()[:4] == b"\x89PNG"


def test_jiyu_plot_draws_a_runs_png_from_its_events(tmp_path):
    run, files = _finished_run()
    done = jiyu("plot", run.id[:6])
    assert (done.returncode, done.stdout.strip()) == (0, str(files.loss_plot)), done.stderr
    assert files.loss_plot.read_bytes()[:4] == b"\x89PNG"
    elsewhere = tmp_path / "curve.png"
    assert jiyu("plot", run.id, "-o", str(elsewhere)).returncode == 0 and elsewhere.read_bytes()[:4] == b"\x89PNG"


def test_jiyu_plot_refusals_are_one_line_with_exit_code_2(tmp_path):
    run, _ = _finished_run()
    empty = RunStore().create("job", "silent", status="running", pid=os.getpid())
    for args, words in (
        (["nope"], "nope"),
        ([empty.id], "has logged no loss yet"),
        ([run.id, "-o", str(tmp_path / "missing" / "x.png")], "cannot write"),
    ):
        done = jiyu("plot", *args)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_one_status_palette_in_the_panel_the_tables_and_the_summary():
    """Each status has the colour of the panel's chip (the same JupyterLab theme variable) in
    the %jobs table and the dashboard's summary; %jobs had them the other way round."""
    import re

    from jiyu_magics.core.runs.model import RunStatus
    from jiyu_magics.core.store.run_row import Run
    from jiyu_magics.views.run_table import render_html
    from jiyu_magics.views.status_palette import status_colour

    css = (ROOT / "labextension" / "style" / "base.css").read_text()
    chips = {}
    for selectors, body in re.findall(r"((?:\.jp-JiyuChip\.jp-mod-\w+,?\s*)+)\{([^}]*)\}", css):
        colour = re.search(r"background:\s*var\((--jp-[\w-]+)", body)
        if colour is None:  # a rule for the chip's place in a row, not its colour
            continue
        for status in re.findall(r"jp-mod-(\w+)", selectors):
            chips[status] = colour.group(1)
    for status in RunStatus:
        assert status_colour(status).startswith(f"var({chips[status.value]},"), status
    table = render_html(
        [Run(id="r1", name="a", kind="job", status="running"), Run(id="r2", name="b", kind="job", status="succeeded")],
        everything=True,
    )
    assert f"color:{status_colour('running')}" in table and "var(--jp-brand-color1" in status_colour("running")
    assert f"color:{status_colour('succeeded')}" in table and "var(--jp-success-color1" in status_colour("succeeded")
    view = TrainingView()
    view.feed(_events() + [{"kind": "end", "status": "failed", "step": 50, "message": "boom"}])
    assert f"color:{status_colour('failed')}" in summary_html(view, svg=loss_svg(view))
    assert "var(--jp-border-color2" in loss_svg(view), "gridlines in the theme's colours"


def test_the_user_picks_the_loss_charts_scale(ip):
    """--scale log|linear|auto: the live SVG and the summary PNG follow it; a bad value is refused
    in one line by the magic."""
    from IPython.core.error import UsageError

    from jiyu_magics.widgets.train_dashboard import TrainingDashboard

    view = _spiky_view()  # spans 1000x: auto draws it on a log scale
    assert "log scale" in loss_svg(view) and "log scale" in loss_svg(view, scale="log")
    assert "log scale" not in loss_svg(view, scale="linear")
    flat = TrainingView()
    flat.feed(_events()[:1] + [{"kind": "step", "step": s, "loss": 2.0 - s / 100} for s in range(1, 50)])
    assert "log scale" not in loss_svg(flat) and "log scale" in loss_svg(flat, scale="log")
    assert render_loss_png(view, scale="linear") != render_loss_png(view, scale="log")
    assert TrainingDashboard(scale="linear").scale == "linear"
    try:
        ip.run_cell_magic("train", "--scale sideways", "pass")
    except UsageError as error:
        assert "sideways" in str(error) and "auto" in str(error)
    else:
        raise AssertionError("--scale sideways was accepted")


def test_a_log_axis_narrower_than_half_a_decade_still_gets_three_labels():
    """A loss from 2.4 down to 0.93 on a log axis: its decades and 2s and 5s give 1 and 2 alone,
    so the labels are round linear values, as the panel's charts do (labextension/src/chart.ts)."""
    import re

    view = TrainingView()
    view.feed(_events()[:1] + [{"kind": "step", "step": s, "loss": 2.4 - s * 0.03} for s in range(1, 50)])
    gridline_label = re.compile(r"border-color2,#eee\)'/><text [^>]*>([0-9.]+)</text>")
    assert [float(t) for t in gridline_label.findall(loss_svg(view, scale="log"))] == [1.0, 1.5, 2.0]
    wide = [float(t) for t in gridline_label.findall(loss_svg(_spiky_view()))]
    assert wide == [0.01, 0.1, 1.0, 10.0], wide
