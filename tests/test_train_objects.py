"""No silent reuse of objects from earlier cells (issue 11): ``%%train`` in a real IPython shell
takes ``loss_fn``, ``val_loader``, ``scheduler`` and ``train_step`` from its own cell, or from the
notebook only where they fit, and names the ones it took from the notebook, with their cell."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles

from .train_models import shell_setup

SETUP = shell_setup(512)

MODEL = """
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
optimizer = torch.optim.AdamW(model.parameters(), 1e-2)
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
"""
LEFTOVERS = """
val_loader = DataLoader(TensorDataset(X[:128], y[:128]), batch_size=64)
loss_fn = nn.CrossEntropyLoss()
"""


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP, store_history=True)
    return ip


def cell(shell, source: str) -> int:
    """Runs a cell as a notebook does (kept in the history); returns its execution count."""
    count = shell.execution_count
    shell.run_cell(source, store_history=True)
    return count


def events_of(shell) -> list[dict]:
    return read_events(RunFiles.of(shell.user_ns["train_result"].run_id).events)[0]


def start_of(shell) -> dict:
    return next(e for e in events_of(shell) if e["kind"] == "start")


def test_objects_from_earlier_cells_are_named_with_their_cell(shell, capsys):
    made = cell(shell, LEFTOVERS)
    cell(shell, "%%train --epochs 1" + MODEL)
    note = f"from the notebook: val_loader (In [{made}]), loss_fn (In [{made}])"
    assert start_of(shell)["from_notebook"] == note
    header = capsys.readouterr().out.splitlines()[0]  # terminal IPython: the run's header, its id first
    assert header.startswith(f"run {shell.user_ns['train_result'].run_id} · ") and header.endswith(note)
    assert shell.user_ns["train_result"].val_acc is not None


def test_objects_of_this_cell_are_not_named(shell, capsys):
    cell(shell, LEFTOVERS)
    cell(shell, "%%train --epochs 1" + MODEL + LEFTOVERS)
    assert start_of(shell).get("from_notebook") is None
    assert "from the notebook" not in capsys.readouterr().out


def test_a_leftover_scheduler_of_another_optimizer_is_left_out_and_named(shell, capsys):
    """The old OneCycleLR ran out after 5 steps: stepped again, it would raise mid-run."""
    made = cell(
        shell, MODEL + "scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.01, total_steps=5)\n" + LEFTOVERS
    )
    cell(shell, "%%train --epochs 1" + MODEL)
    result = shell.user_ns["train_result"]
    assert result.status == "succeeded" and result.step == 16
    assert {row["lr"] for row in result.history if row["lr"] is not None} == {0.01}, "no scheduler stepped"
    assert f"left out: scheduler (In [{made}]), which steps another optimizer" in start_of(shell)["from_notebook"]


def test_a_scheduler_of_another_optimizer_named_by_this_cell_is_refused(shell):
    cell(shell, MODEL + LEFTOVERS)
    with pytest.raises(UsageError) as error:
        shell.run_cell_magic(
            "train",
            "--epochs 1",
            "old = optimizer\n" + MODEL + "scheduler = torch.optim.lr_scheduler.StepLR(old, step_size=1)\n",
        )
    assert str(error.value) == (
        "scheduler steps another optimizer, not optimizer: create it from this one "
        "(e.g. OneCycleLR(optimizer, ...)) or pass --scheduler NONE"
    )


def test_a_scheduler_of_this_optimizer_from_an_earlier_cell_is_used_and_named(shell):
    cell(shell, MODEL + LEFTOVERS)
    made = cell(shell, "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)")
    cell(shell, "%train --max-steps 3 --log-every 1")
    lrs = [row["lr"] for row in shell.user_ns["train_result"].history if row["lr"] is not None]
    assert lrs[:3] == [0.005, 0.0025, 0.00125]
    assert f"scheduler (In [{made}])" in start_of(shell)["from_notebook"]


def test_loss_fn_none_uses_the_models_own_loss(shell):
    """A leftover loss_fn must not replace a model's own ``.loss`` (dict batches)."""
    cell(
        shell,
        "called = []\nloss_fn = lambda outputs, labels: called.append(1) or outputs.sum()\n"
        "class Own(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.net = nn.Linear(20, 2)\n"
        "    def forward(self, inputs, labels):\n"
        "        logits = self.net(inputs)\n"
        "        return type('Out', (), {'loss': nn.functional.cross_entropy(logits, labels), "
        "'logits': logits})()\n"
        "batches = [{'inputs': X[i:i + 32], 'labels': y[i:i + 32]} for i in range(0, 512, 32)]",
    )
    cell(
        shell,
        "%%train --max-steps 8 --loss-fn NONE --no-ckpt\n"
        "model = Own(); optimizer = torch.optim.AdamW(model.parameters(), 1e-2); train_loader = batches",
    )
    assert shell.user_ns["train_result"].status == "succeeded"
    assert shell.user_ns["called"] == []


def test_no_val_leaves_a_leftover_val_loader_out(shell):
    cell(shell, LEFTOVERS)
    cell(shell, "%%train --epochs 1 --no-val" + MODEL)
    assert not [e for e in events_of(shell) if e["kind"] == "val"]
    assert shell.user_ns["train_result"].val_acc is None
    assert start_of(shell)["from_notebook"].startswith("from the notebook: loss_fn (In [")


def test_the_loss_this_cell_defines_wins_over_a_leftover_train_step(shell):
    cell(shell, LEFTOVERS + "train_step = lambda model, batch: 1 / 0")
    cell(shell, "%%train --epochs 1" + MODEL + "loss_fn = nn.CrossEntropyLoss()\n")
    assert shell.user_ns["train_result"].status == "succeeded"


def test_a_schedule_sized_for_other_steps_is_warned_about(shell, capsys):
    """OneCycleLR sized with len(train_loader) under --accum 4 never finishes its schedule."""
    cell(shell, LEFTOVERS)
    cell(
        shell,
        "%%train --epochs 2 --accum 4"
        + MODEL
        + "scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.01, total_steps=2 * len(train_loader))\n",
    )
    advice = (
        "OneCycleLR is sized for 32 more steps (total_steps=32) but this run makes 8 optimizer steps "
        "(--accum 4: one optimizer step per 4 batches): its schedule will not finish. "
        "Size it with total_steps=8."
    )
    assert [e["message"] for e in events_of(shell) if e["kind"] == "advice"] == [advice]
    assert f"advice: {advice}" in capsys.readouterr().out


def test_a_schedule_that_fits_gets_no_advice(shell):
    cell(shell, LEFTOVERS)
    cell(
        shell,
        "%%train --epochs 2 --accum 4"
        + MODEL
        + "scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.01, total_steps=2 * len(train_loader) // 4)\n",
    )
    assert shell.user_ns["train_result"].status == "succeeded"
    assert not [e for e in events_of(shell) if e["kind"] == "advice"]


def test_the_dashboard_header_names_them_in_a_real_kernel(tmp_path):
    """Where it is shown: the dashboard's header, kept in the static summary the cell ends with."""
    from .notebook_runner import execute, html_of, notebook

    nb = execute(notebook("%load_ext jiyu_magics\n" + SETUP, LEFTOVERS, "%%train --epochs 1" + MODEL), tmp_path)
    summary = html_of(nb.cells[2])
    assert "from the notebook: val_loader (In [2]), loss_fn (In [2])" in summary, summary


@pytest.mark.parametrize(
    "source, names",
    [
        ("a = 1\nb, (c, *d) = 2, (3, 4)\ne += 1\nf: int = 1", {"a", "b", "c", "d", "e", "f"}),
        ("if x:\n    g = 1\nfor h in []: pass\nwith open(p) as i: pass", {"g", "h", "i"}),
        ("import torch.nn as nn\nimport os.path\nfrom x import y as z", {"nn", "os", "z"}),
        ("def fn():\n    inner = 1\nclass K:\n    attr = 1\nsq = [k for k in range(3)]", {"fn", "K", "sq"}),
        ("%%train --epochs 1\nval_loader = 1\nloss_fn = 2", {"val_loader", "loss_fn"}),
        ("%time scheduler = 3", {"scheduler"}),
        ("%%time\nloss_fn = 1\n%timeit q = 2", {"loss_fn"}),
        ("x = (", set()),
    ],
)
def test_which_names_a_cell_binds(source, names):
    from jiyu_magics.magics.defining_cell import names_bound_by

    assert names_bound_by(source) == names


def test_an_error_raised_by_jiyu_keeps_its_frames():
    """Only errors of the user's code lose jiyu's frames: one raised by jiyu is ours to read."""
    from jiyu_magics.magics.user_traceback import without_jiyu_frames
    from jiyu_magics.train.fit_options import FitOptions

    with pytest.raises(ValueError) as error:
        FitOptions(epochs=-1).validate()
    assert without_jiyu_frames(error.value.__traceback__) is None
