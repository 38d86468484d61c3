"""The example notebooks in notebooks/, executed as a user would run them (nbclient, a real
kernel), made small through their ``parameters`` cell, and their results checked."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from jiyu_magics.core.store.run_store import RunStore

from .conftest import ROOT
from .notebook_runner import execute, mimetypes_of, text_of, with_parameters

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A copy of notebooks/: runs write next to the notebooks, never into the repository."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    folder = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder)
    return folder


def run(workdir: Path, name: str, timeout: int = 300, **params) -> nbformat.NotebookNode:
    nb = with_parameters(nbformat.read(workdir / name, as_version=4), **params)
    return execute(nb, cwd=workdir, timeout=timeout)


def output_of(nb, startswith: str) -> str:
    return next(text_of(c) for c in nb.cells if c.cell_type == "code" and c.source.startswith(startswith))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_are_stripped_and_parameterised(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    assert code[0].source == "%load_ext jiyu_magics"


def test_quickstart_trains_digits_to_95_percent(workdir):
    nb = run(workdir, "01_quickstart.ipynb", epochs=8, amp="bf16")
    report = output_of(nb, "model.eval()")
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", report).group(1))
    assert accuracy >= 95.0, report
    assert "succeeded after 230 steps" in report  # 8 + 2 resumed epochs x 23 batches of 64
    resumed = output_of(nb, "%train --resume last")
    assert "amp bf16" in resumed and "Trained 46 more steps, to step 230 (10 epochs)" in resumed, resumed
    assert "image/png" in mimetypes_of(nb.cells[-1])  # the confusion matrix
    status = next(c for c in nb.cells if c.source == "%gpu_status")
    assert "text/html" in mimetypes_of(status)  # the GPU table, or the one-line no-GPU answer
    # what jiyu says along the way (which run --resume last continues...) is output, not the
    # stderr box a notebook paints pink for errors and warnings
    code = [c for c in nb.cells if c.cell_type == "code"]
    stderr = [(c.source.splitlines()[0], o.text) for c in code for o in c.outputs if o.get("name") == "stderr"]
    assert stderr == [], stderr
    assert "jiyu: --resume last: " in "".join(o.text for o in resumed_cell(nb).outputs if o.get("name") == "stdout")


def resumed_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%train --resume last"))


def test_amp_transformer_compares_fp32_and_bf16(workdir):
    nb = run(workdir, "02_amp_transformer.ipynb", steps=30, d_model=64, n_layers=1)
    table = output_of(nb, "import statistics")
    rates = dict(re.findall(r"(fp32|bf16):\s+([\d,]+) samples/s", table))
    assert set(rates) == {"fp32", "bf16"} and all(float(v.replace(",", "")) > 0 for v in rates.values())
    assert re.search(r"bf16 / fp32 throughput: [\d.]+x", table)
    names = {r.name: r for r in RunStore().list()}
    assert names["chars-fp32"].status == names["chars-bf16"].status == "succeeded"
    sample = output_of(nb, "@torch.no_grad()")
    assert sample.startswith("def ") and len(sample) > 150


def test_background_job_notebook_runs_the_quickstart_as_a_job(workdir):
    nb = run(workdir, "04_background_job.ipynb", timeout=600, epochs=2)
    assert output_of(nb, "run = %submit").startswith("Submitted run ")
    final = output_of(nb, "from jiyu_magics import jobs")
    assert re.match(r"run [0-9a-f]{8}: succeeded, exit code 0", final), final
    assert "test accuracy" in output_of(nb, "%job logs")
    job = next(r for r in RunStore().list() if r.name == "quickstart-job")
    assert job.status == "succeeded" and job.params == {"epochs": 2}


def test_ddp_notebook_trains_with_two_ranks_and_brings_the_model_back(workdir):
    nb = run(workdir, "03_ddp_from_a_cell.ipynb", epochs=6)
    report = output_of(nb, "model.eval()")
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", report).group(1))
    assert accuracy >= 93.0, report  # evaluated in the kernel, with the weights rank 0 handed back
    (ddp_run,) = [r for r in RunStore().list() if r.name == "digits-ddp"]
    assert (ddp_run.kind, ddp_run.nproc, ddp_run.status) == ("ddp", 2, "succeeded")
    assert "succeeded after 138 steps" in report  # 6 epochs x 23 batches of 32 per rank (1437 / 2 ranks)


def test_ranks_notebook_keeps_its_ranks_and_trains_on_them(workdir):
    nb = run(workdir, "05_ranks.ipynb", timeout=600, epochs=2)
    loaded = output_of(nb, "%%ranks --all-output\nimport torch")
    assert sorted(loaded.splitlines()) == [
        "[rank0] rank 0 of 2: 1437 training images",
        "[rank1] rank 1 of 2: 1437 training images",
    ]
    assert "pushed hyper to 2 rank(s)" in output_of(nb, "hyper = ")
    failed = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%ranks\nif rank == 1:"))
    (error,) = [o for o in failed.outputs if o.output_type == "error"]
    assert error.evalue == "rank 1: ValueError: a bad batch on rank 1", error.evalue
    assert "the process group was rebuilt" in re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
    kept = output_of(nb, "%%ranks --all-output\ntotal = torch.ones(1)")
    assert sorted(kept.splitlines()) == [
        f"[rank{r}] rank {r}: still 1437 training images and a model; all_reduce says 2" for r in (0, 1)
    ], kept
    streamed = output_of(nb, "%%ranks --bg")  # updated in place from the background (update_display_data)
    assert "rank 0: 180 predictions made" in streamed and "finished (%ranks wait shows how)" in streamed, streamed
    assert re.search(r"\d+\.\d% of 360 test images right", output_of(nb, "%ranks gather preds")), nb
    accuracies = re.findall(
        r"\[rank(\d)\] rank \d: test accuracy ([\d.]+)%", output_of(nb, "%%ranks --all-output\nmodel.eval()")
    )
    assert sorted(rank for rank, _ in accuracies) == ["0", "1"] and len({a for _, a in accuracies}) == 1
    assert float(accuracies[0][1]) > 80
    pulled = output_of(nb, "import torch\n\nclass DigitsCNN")
    assert "loaded rank 0's model weights into the notebook's model" in pulled and "succeeded" in pulled
    runs = {r.name: r for r in RunStore().list()}
    assert (runs["digits-pool"].kind, runs["digits-pool"].status) == ("ranks", "succeeded")
    assert (runs["digits-on-pool"].kind, runs["digits-on-pool"].status) == ("ddp", "succeeded")
    assert "ranks pool" in output_of(nb, "%ranks stop") and "succeeded" in output_of(nb, "%ranks stop")
