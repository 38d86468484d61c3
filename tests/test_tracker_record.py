"""What a run records, as a tracker would (issue 25, items 4, 5, 10, 12): the optimizer's
hyperparameters per parameter group, the model, the batch size, the notebook's parameters (an
in-kernel run too), and, for a resumed run, the run it continues. Through ``%%train`` in a real
IPython shell and a real ipykernel (nbclient), read back from the event log, the run store and
``jiyu show``/``jiyu compare``."""

from __future__ import annotations

import json
import os
import re

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from jiyu_magics.core.events.fold import RunState
from jiyu_magics.core.events.log import read_events
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .notebook_runner import execute, notebook, text_of

SETUP = """import torch
x = torch.randn(64, 4); y = (x[:, 0] > 0).long()
data = torch.utils.data.TensorDataset(x, y)"""

BODY = """
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.AdamW([
    {"params": model[0].parameters()},
    {"params": model[2].parameters(), "lr": lr / 10, "weight_decay": 0.0},
], lr=lr, betas=(0.8, 0.99), weight_decay=0.05)
train_loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True)
loss_fn = torch.nn.CrossEntropyLoss()"""


def start_of(run_id: str) -> dict:
    return next(e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "start")


def train(shell, line: str, body: str = BODY) -> str:
    """A %%train cell as the user runs it (stored in the history, so its raw line is known)."""
    with capture_output():
        result = shell.run_cell(f"%%train {line}{body}", store_history=True)
    result.raise_error()
    return shell.user_ns["train_result"].run_id


@pytest.fixture
def shell(ip):
    ip.run_cell(SETUP)
    ip.run_cell("lr = 0.01\nbatch = 16\nsteps = 8\nseed = 3", store_history=True)
    return ip


def test_the_start_event_records_the_optimizer_per_group_the_model_and_the_line_parameters(shell):
    run_id = train(shell, "--max-steps {steps} --seed {seed} --name tracked --keep-ckpts 2")
    start = start_of(run_id)
    assert start["model"] == "Sequential" and start["optimizer"] == "AdamW"
    assert start["params"] == 4 * 8 + 8 + 8 * 2 + 2
    first, second = start["optimizer_groups"]
    assert first["lr"] == 0.01 and first["weight_decay"] == 0.05 and first["betas"] == [0.8, 0.99]
    assert second["lr"] == pytest.approx(0.001) and second["weight_decay"] == 0.0 and "eps" in second
    assert start["batch_size"] == 16 and start.get("scheduler") is None
    # no notebook file here (terminal IPython): the names the line used as {name} are recorded,
    # and the notebook's names the body reads (lr, batch; issue 37), not those it defines (model)
    assert start["config"] == {"steps": 8, "seed": 3, "lr": 0.01, "batch": 16}
    assert start["options"]["keep_ckpts"] == 2 and start["options"]["max_steps"] == 8
    assert RunStore().get(run_id).params == start["config"], "the store lists them as its parameters"


def test_a_changed_learning_rate_shows_in_jiyu_compare_though_only_the_notebook_changed(shell):
    first = train(shell, "--max-steps {steps} --name lr-sweep")
    shell.run_cell("lr = 0.003", store_history=True)
    second = train(shell, "--max-steps {steps} --name lr-sweep")
    done = jiyu("compare", first, second)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("*")}
    assert "optimizer.lr" in rows and "0.01" in rows["optimizer.lr"] and "0.003" in rows["optimizer.lr"]
    assert "optimizer.lr[1]" in rows, "the second parameter group's lr changed too"
    assert "param.steps" not in rows, "steps is the same in both"
    assert re.search(r"^same in every run: .*model.class=Sequential", done.stdout, re.M), done.stdout
    as_json = json.loads(jiyu("compare", first, second, "--json").stdout)
    assert [r["optimizer.lr"] for r in as_json] == [0.01, 0.003]


def test_a_resumed_run_records_its_parent_and_jiyu_show_tells_the_lineage(shell):
    parent = train(shell, "--max-steps {steps} --name lineage")
    with capture_output():
        shell.run_cell("%train --resume last --name lineage --max-steps 12", store_history=True).raise_error()
    child = shell.user_ns["train_result"].run_id
    start = start_of(child)
    assert (start["parent_run"], start["parent_step"]) == (parent, 8)
    assert RunStore().get(child).summary["parent_run"] == parent, "listings carry it (the panel's lineage)"
    assert RunState.of(read_events(RunFiles.of(parent).events)[0]).parent_run is None
    shown = jiyu("show", child)
    assert shown.returncode == 0, shown.stderr
    assert f"resumed from {parent} (lineage) at step 8" in shown.stdout
    assert f"resumed by {child} (succeeded)" in jiyu("show", parent).stdout


def test_jiyu_show_lists_the_checkpoints_on_disk_and_how_many_were_rotated_out(shell):
    run_id = train(shell, "--max-steps 8 --ckpt-every 2 --keep-ckpts 2 --name rotated")
    shown = jiyu("show", run_id).stdout
    assert "checkpoints 2 on disk (2 older rotated out by --keep-ckpts or deleted)" in shown, shown
    assert shown.count("resume: %train --resume ") == 2 and "--name rotated" in shown
    data = json.loads(jiyu("show", run_id, "--json").stdout)
    assert [c["step"] for c in data["checkpoints"]] == [6, 8] and data["rotated"] == 2
    assert data["optimizer_groups"][0]["lr"] == 0.01


def test_jiyu_show_and_compare_refuse_bad_input_in_one_line():
    for args, words in (
        (("show", "zzz"), "no run with id 'zzz'"),
        (("compare", "abc"), "compare takes two or more run ids"),
        (("shwo", "abc"), "did you mean show?"),
        (("jobs", "--limt", "3"), "did you mean --limit?"),
    ):
        done = jiyu(*args)
        assert done.returncode == 2 and words in done.stderr and len(done.stderr.splitlines()) == 1, (args, done)


def test_a_braced_name_that_is_none_or_unset_is_named_in_one_line(shell):
    """The quickstart trap: the parameters cell re-run sets amp back to None."""
    shell.run_cell("amp = None", store_history=True)
    with capture_output():
        result = shell.run_cell("%%train --max-steps 2 --amp {amp}" + BODY, store_history=True)
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec).startswith("{amp} in the %train line is None: set amp to a value")
    with pytest.raises(UsageError, match=r"\{nope\} in the %train line: nope is not defined"):
        shell.run_line_magic("train", "--max-steps {nope}")
    with pytest.raises(UsageError, match=r"did you mean --epochs\?"):
        shell.run_line_magic("train", "--epcohs 3")


def test_terminal_ipython_prints_the_run_id_as_training_starts(shell, capfd):
    shell.run_cell("%%train --max-steps 4 --name terminal" + BODY, store_history=True)
    run_id = shell.user_ns["train_result"].run_id
    out = capfd.readouterr().out
    assert f"run {run_id} · terminal · cpu" in out, out


def test_in_a_kernel_the_parameters_cell_of_the_saved_notebook_is_recorded(tmp_path, monkeypatch):
    """ipykernel gets no cell tags: the notebook the server started the kernel for (its
    JPY_SESSION_NAME) is read for the cell tagged parameters; the values come from the kernel."""
    nb = notebook(
        "%load_ext jiyu_magics",
        "lr = 0.02\nepochs = 1\nnote = 'baseline'",
        SETUP,
        "lr = lr * 2  # a later cell changes it: the value trained with is recorded",
        "%%train --epochs {epochs} --name kernel-params" + BODY.replace("batch_size=batch", "batch_size=16"),
        "print(train_result.run_id)",
        tags={1: ["parameters"]},
    )
    path = tmp_path / "sweep.ipynb"
    path.write_text(json.dumps(nb))
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    done = execute(nb, tmp_path)
    run_id = text_of(done.cells[5]).strip()
    start = start_of(run_id)
    assert start["config"] == {"lr": 0.04, "epochs": 1, "note": "baseline"}
    assert start["optimizer_groups"][0]["lr"] == 0.04
    assert os.environ["JPY_SESSION_NAME"] == str(path)
