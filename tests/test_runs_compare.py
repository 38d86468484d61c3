"""``%runs compare`` and ``jiyu_magics.runs()``: two real kernel runs of one name, trained with
different options, side by side; the option that differs is marked, the curves overlaid."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

import jiyu_magics

from .conftest import ROOT

CELL = """model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), 0.1)
train_loader = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(10)]
loss_fn = torch.nn.MSELoss()"""


@pytest.fixture
def two_runs(ip, jiyu_home):
    ip.run_cell("import torch")
    ids = []
    for steps in (20, 30):
        with capture_output():
            ip.run_cell_magic("train", f"--max-steps {steps} --name cmp --log-every 1", CELL)
        ids.append(ip.user_ns["train_result"].run_id)
    return ids


def test_runs_compare_draws_both_curves_and_marks_the_differing_option(ip, two_runs):
    with capture_output() as captured:
        ip.run_line_magic("runs", "compare " + " ".join(two_runs))
    (output,) = captured.outputs
    page = output.data["text/html"]
    assert page.count("class='jiyu-compare-line'") == 2
    assert all(f"data-run='cmp ({run_id})'" in page for run_id in two_runs)
    assert (
        "class='jiyu-differs' style='font-weight:bold;box-shadow:inset 4px 0 var(--jp-warn-color1,#f57c00)' "
        "data-row='option.max_steps'" in page
    )
    assert "data-row='option.seed'" not in page.split("jiyu-differs")[-1].split("</tr>")[0]
    assert "* option.max_steps" in output.data["text/plain"]
    with pytest.raises(UsageError, match="no run with id 'zzz'"):
        ip.run_line_magic("runs", "compare zzz")
    with pytest.raises(UsageError, match="usage: %runs compare"):
        ip.run_line_magic("runs", "")


def test_runs_returns_a_dataframe_with_pandas(two_runs):
    table = jiyu_magics.runs(*two_runs)
    assert type(table).__name__ == "DataFrame"
    assert list(table["option.max_steps"]) == [20, 30] and list(table["steps"]) == [20, 30]
    assert (table["final_loss"] > 0).all() and (table["best_loss"] <= table["final_loss"]).all()


def test_runs_returns_dicts_without_pandas(two_runs, jiyu_home):
    """pandas made unimportable in a fresh interpreter, as where it is not installed."""
    code = (
        "import sys, json; sys.modules['pandas'] = None\nimport jiyu_magics\n"
        f"print(json.dumps(jiyu_magics.runs(*{two_runs!r}), default=str))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), "JIYU_HOME": str(jiyu_home)},
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["id"] for r in rows] == two_runs and [r["option.max_steps"] for r in rows] == [20, 30]
