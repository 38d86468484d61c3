"""A job submitted from a real notebook kernel (nbclient) outlives that kernel, and a new
kernel sees it with ``%jobs`` / ``%job attach`` until it succeeds."""

from __future__ import annotations

import shutil
import subprocess

import psutil

from jiyu_magics.core.events.log import summarize
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .jobs_workload import assert_no_processes, wait_for, write_notebook
from .notebook_runner import execute, html_of, mimetypes_of, notebook, text_of, widget_html


def test_a_job_survives_its_kernel_and_shows_in_a_new_one(tmp_path, torchrun_tmp, artifacts):
    workload = write_notebook(tmp_path / "train.ipynb")
    first = execute(
        notebook(
            "%load_ext jiyu_magics",
            f"%submit {workload} --nproc 2 -p steps 60 -p step_seconds 0.1 --name survivor",
            "import os; os.getpid()",
        ),
        tmp_path,
    )
    out = text_of(first.cells[1])
    assert out.startswith("Submitted run "), out
    run_id = out.split()[2]
    kernel_pid = int(text_of(first.cells[2]))
    assert not psutil.pid_exists(kernel_pid) or psutil.Process(kernel_pid).status() == psutil.STATUS_ZOMBIE

    run = RunStore().get(run_id)
    assert run.active, "the job died with the kernel that submitted it"
    wait_for(lambda: summarize(RunFiles.of(run_id).events)["step"], what="a training step")

    second = execute(
        notebook(
            "%load_ext jiyu_magics",
            "%jobs",
            f"%job attach {run_id} --wait",
            "d = get_ipython().magics_manager.registry['JobMagics'].attached\n"
            "print(d.renders, d.view.step, d.view.status, len(d.view.losses))",
        ),
        tmp_path,
        store_widget_state=True,
    )
    table, summary = html_of(second.cells[1]), html_of(second.cells[2])
    assert f"<code>{run_id}</code>" in table and "survivor" in table and ">running<" in table
    assert "<progress" in table
    (pane,) = widget_html(second, "jiyu-rank-output")
    assert "[rank0] rank 0 done" in pane and "[rank1]" not in pane, "the ranks' output under the dashboard"
    renders, step, status, points = text_of(second.cells[3]).split()
    assert int(renders) >= 2 and int(step) == 60 and status == "succeeded" and int(points) >= 2
    # the live widget was replaced in place by the final summary with the loss plot
    assert run_id in summary and "succeeded" in summary and "image/png" in mimetypes_of(second.cells[2])
    save_artifacts(artifacts, table, summary)

    done = RunStore().get(run_id)
    assert done.status == "succeeded", "attach --wait returns only once the run has ended"
    final = summarize(RunFiles.of(run_id).events)
    assert final["step"] == 60 and final["loss"] is not None and final["end_status"] == "succeeded"

    again = execute(notebook("%load_ext jiyu_magics", f"%job attach {run_id[:5]}"), tmp_path)
    assert "step 60/60" in text_of(again.cells[1]) or "60" in html_of(again.cells[1])
    assert "image/png" in mimetypes_of(again.cells[1]), "re-attaching to a finished run shows its whole history"
    assert_no_processes(run_id)


def save_artifacts(artifacts, table: str, summary: str) -> None:
    """The %jobs table and %job attach summary as a page (and a PNG where Chromium exists)."""
    page = artifacts / "jobs_table.html"
    page.write_text(f"<html><body style='font-family:sans-serif'>{table}<hr>{summary}</body></html>")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={artifacts / 'jobs_table.png'}",
                "--window-size=900,420",
                page.as_uri(),
            ],
            capture_output=True,
            timeout=60,
        )


def test_attach_follows_in_the_background_and_its_stop_button_stops_the_job(tmp_path, torchrun_tmp):
    """The kernel stays free while the dashboard follows the job; the dashboard's own Stop
    button (clicked through ipywidgets' API in the kernel) stops every process of the job."""
    workload = write_notebook(tmp_path / "long.ipynb")
    run = jobs_submit(workload)
    wait_for(lambda: summarize(RunFiles.of(run.id).events)["step"], what="a training step")
    nb = execute(
        notebook(
            "%load_ext jiyu_magics",
            f"%job attach {run.id}",
            "import time\nd = get_ipython().magics_manager.registry['JobMagics'].attached\n"
            "first = d.view.step; time.sleep(3); print('kernel free; steps went', first, '->', d.view.step)",
            "d.stop_button.click()\n"
            "for _ in range(300):\n"
            "    if d.view.finished or not __import__('jiyu_magics').jobs.resolve(d.view.run_id).active: break\n"
            "    time.sleep(0.1)\n"
            "time.sleep(2); print(__import__('jiyu_magics').jobs.resolve(d.view.run_id).status)",
        ),
        tmp_path,
    )
    words = text_of(nb.cells[2]).split()
    assert int(words[-1]) > int(words[-3]), "the dashboard did not follow the job while the kernel ran other cells"
    assert text_of(nb.cells[3]).strip().endswith("stopped")
    assert RunStore().get(run.id).status == "stopped"
    assert_no_processes(run.id)


def jobs_submit(workload):
    from jiyu_magics import jobs

    return jobs.submit(workload, nproc=2, params={"steps": 400, "step_seconds": 0.1}, name="long")


def test_attach_to_a_job_with_two_training_cells_shows_each_in_order(tmp_path, torchrun_tmp):
    """One job, two %%train cells (different names, lengths): %job attach shows two summaries in
    order, each titled with the job's name and which call it is, each with its own numbers."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from jiyu_magics import jobs

    data = (
        "%load_ext jiyu_magics\nimport torch\nx = torch.randn(256, 4); y = x.sum(1, keepdim=True)\n"
        "data = torch.utils.data.TensorDataset(x, y)"
    )
    cell = (
        "%%train --max-steps {steps} --name {name} --device cpu\nmodel = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), 0.05)\n"
        "train_loader = torch.utils.data.DataLoader(data, batch_size=16)\nloss_fn = torch.nn.MSELoss()"
    )
    path = tmp_path / "two_cells.ipynb"
    nbformat.write(
        new_notebook(
            cells=[
                new_code_cell(data),
                new_code_cell(cell.format(steps=6, name="warm-up")),
                new_code_cell(cell.format(steps=14, name="main-fit")),
            ],
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        ),
        path,
    )
    run = jobs.submit(path, nproc=1, name="two-cells")
    wait_for(lambda: not RunStore().get(run.id).active, timeout=180, what="the job to end")
    assert RunStore().get(run.id).status == "succeeded", RunFiles.of(run.id).log.read_text()[-2000:]

    nb = execute(notebook("%load_ext jiyu_magics", f"%job attach {run.id}"), tmp_path)
    shown = [out.data["text/plain"] for out in nb.cells[1].outputs if out.output_type == "display_data"]
    summaries = [text for text in shown if text.startswith("run ")]
    assert len(summaries) == 2 and len(shown) == 3, shown  # and the ranks' output pane, once
    first, second = summaries
    assert "two-cells · fit 1: warm-up" in first and "step 6/6" in first, first
    assert "two-cells · fit 2: main-fit" in second and "step 14/14" in second, second
