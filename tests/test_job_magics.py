"""``%submit``, ``%jobs`` and ``%job`` in a real IPython shell, on real detached jobs."""

from __future__ import annotations

import os
import time

import nbformat
import pytest
from IPython.core.error import UsageError
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.store.run_store import RunStore

from .jobs_workload import assert_no_processes, finished, processes_of, wait_for


@pytest.fixture(autouse=True)
def quiet_jobs(torchrun_tmp, monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)


def tiny_notebook(path, source="print('tiny job says hi')"):
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), path)
    return path


def only_run():
    (run,) = RunStore().list()
    return run


def test_submit_without_a_path_runs_the_notebook_jupyter_named(ip, tmp_path, monkeypatch, capsys):
    (tmp_path / "localmod.py").write_text("WORD = 'hi'\n")  # a module next to the notebook, as in Jupyter
    nb = tiny_notebook(tmp_path / "current.ipynb", "import localmod\nprint('tiny job says', localmod.WORD)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", "current.ipynb")  # relative to the kernel's folder
    ip.run_line_magic("submit", "--name from-session")
    out = capsys.readouterr().out
    run = only_run()
    assert out.startswith(f"Submitted run {run.id} (from-session): 1 process(es) on the CPU from {nb}")
    assert f"%job logs {run.id} -f" in out and f"%job stop {run.id}" in out
    assert finished(run.id).status == "succeeded"

    ip.run_line_magic("job", f"logs {run.id[:4]} --tail 3")
    assert "[rank0]: tiny job says hi" in capsys.readouterr().out
    ip.run_line_magic("job", f"logs {run.id} -f")  # an ended run: prints everything and returns
    assert "job succeeded" in capsys.readouterr().out
    ip.run_line_magic("jobs", "--all")
    table = capsys.readouterr().out
    assert run.id in table and "succeeded" in table and "from-session" in table
    ip.run_line_magic("jobs", "")
    assert "No active runs" in capsys.readouterr().out
    ip.run_line_magic("job", f"attach {run.id}")
    summary = capsys.readouterr().out
    assert f"run         {run.id}  from-session" in summary and "status      succeeded" in summary


def test_submit_of_this_notebook_warns_when_the_saved_file_is_older_than_the_last_cell(
    ip, tmp_path, monkeypatch, capsys, no_schedulers
):
    nb = tiny_notebook(tmp_path / "edited.ipynb")
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    ip.run_cell("edited_after_save = 1", store_history=True)
    saved = time.time() - 60
    os.utime(nb, (saved, saved))
    ip.run_line_magic("submit", "--backend slurm")  # no process needed
    assert "was last saved at" in capsys.readouterr().out
    os.utime(nb)  # saved now: nothing to say
    ip.run_line_magic("submit", "--backend slurm")
    assert "was last saved at" not in capsys.readouterr().out
    ip.run_line_magic("submit", f"{nb} --backend slurm")  # an explicit path: the user chose that file
    assert "was last saved at" not in capsys.readouterr().out


def test_submit_finds_the_session_notebook_from_an_absolute_path(ip, tmp_path, monkeypatch, capsys, no_schedulers):
    nb = tiny_notebook(tmp_path / "abs.ipynb")
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    ip.run_line_magic("submit", "--backend slurm")  # no process needed to check which notebook was picked
    assert only_run().notebook == str(nb)


def test_submit_without_any_notebook_path_says_to_pass_one(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="cannot tell which notebook this kernel runs; pass its path"):
        ip.run_line_magic("submit", "")


@pytest.mark.parametrize(
    "line, message",
    [
        ("{nb} --nproc 0", "--nproc 0: expected a whole number from 1 to 1024"),
        ("{nb} -p lr", "expected 2 argument"),
        ("{nb} -p lr [1,", "not a valid Python literal"),
        ("{dir}/nope.ipynb", "no such notebook"),
    ],
)
def test_submit_bad_input_is_a_usage_error(ip, tmp_path, line, message):
    nb = tiny_notebook(tmp_path / "nb.ipynb")
    with pytest.raises(UsageError, match=message.replace("[", "\\[")):
        ip.run_line_magic("submit", line.format(nb=nb, dir=tmp_path))
    assert RunStore().list() == []


def test_job_stop_from_the_magic(ip, tmp_path, capsys):
    ip.run_line_magic("submit", str(tiny_notebook(tmp_path / "sleepy.ipynb", "import time\ntime.sleep(120)")))
    run = only_run()
    wait_for(lambda: RunStore().get(run.id).status == "running" and processes_of(run.id), what="running")
    capsys.readouterr()
    ip.run_line_magic("job", f"stop {run.id} --grace 5")
    assert capsys.readouterr().out.strip() == f"Run {run.id} (sleepy): stopped."
    assert_no_processes(run.id)


@pytest.mark.parametrize(
    "line, message",
    [
        ("stop feedbeef", "no run with id 'feedbeef'"),
        ("frobnicate 1", "expected logs, stop or attach"),
        ("", "expected logs, stop or attach"),
        ("logs", "the following arguments are required: id"),
    ],
)
def test_job_bad_input_is_a_usage_error(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("job", line)


def test_magic_help_is_the_docstring(ip):
    assert "jiyu:keep" in ip.find_line_magic("submit").__doc__
    assert "--nproc-per-node" in ip.find_line_magic("submit").__doc__  # magic_arguments adds the options
    assert "%job stop ID" in ip.find_line_magic("job").__doc__


def test_the_kernel_history_records_which_cells_raised(ip):
    from jiyu_magics import jobs
    from jiyu_magics.magics.cell_history import CellHistory

    history = CellHistory.of(ip)
    assert CellHistory.of(ip) is history  # one recorder per shell
    start = len(history.recorded)
    ip.run_cell("base = 40", store_history=True)
    ip.run_cell("base / 0", store_history=True)
    ip.run_cell("!echo skipped-in-a-job", store_history=True)
    cells = history.cells()[-3:]
    assert len(history.recorded) - start == 3
    assert [(c.source, c.succeeded) for c in cells] == [
        ("base = 40", True),
        ("base / 0", False),
        ("!echo skipped-in-a-job", True),
    ]
    script = jobs.export_history(cells, current="print(base + 2)").script
    assert "base / 0" not in script and "left out: it raised an error" in script and "print(base + 2)" in script


@pytest.mark.parametrize(
    "clearing", ["%reset -f", "%reset -f -s", "%reset_selective -f .", "get_ipython().reset(new_session=False)"]
)
def test_a_cell_that_clears_the_namespace_ends_the_history(ip, clearing):
    """%%train --nproc replays the history: after a reset its ranks start from nothing too."""
    from jiyu_magics.magics.cell_history import CellHistory

    history = CellHistory.of(ip)
    ip.run_cell("print('forget me'); before = 1", store_history=True)
    ip.run_cell(clearing, store_history=True)
    ip.run_cell("after = 2", store_history=True)
    assert [c.source for c in history.cells()] == ["after = 2"]
    assert ip.run_line_magic("who_ls", "") == ["after"], "the marker the reset is noticed by stays hidden"


def test_a_reset_before_the_extension_loaded_ends_the_history_too(ip):
    """Cells run before ``%load_ext`` are read from ``In``: a ``%reset`` among them still counts,
    a ``%reset out`` (a cache flush) does not."""
    from jiyu_magics.magics.cell_history import CellHistory

    CellHistory.of(ip).close()  # as if the extension had not been loaded yet
    for source in ("print('forget me')", "%reset -f", "kept = 1", "%reset -f out", "also = 2"):
        ip.run_cell(source, store_history=True)
    assert [c.source.strip() for c in CellHistory.of(ip).cells()] == [
        "kept = 1",
        "get_ipython().run_line_magic('reset', '-f out')",
        "also = 2",
    ]


@pytest.mark.parametrize("deleting", ["del before", "%reset_selective -f ^before$", "%reset -f in"])
def test_deleting_some_names_keeps_the_history(ip, deleting):
    """The ranks replay the deleting cell too, so they delete what the kernel deleted."""
    from jiyu_magics.magics.cell_history import CellHistory

    history = CellHistory.of(ip)
    ip.run_cell("kept = 0", store_history=True)
    ip.run_cell("before = 1", store_history=True)
    ip.run_cell(deleting, store_history=True)
    assert [c.source for c in history.cells()][-3:] == ["kept = 0", "before = 1", deleting]


def test_submit_returns_the_run_id_and_displays_nothing_more(ip, tmp_path, capsys, no_schedulers):
    nb = tiny_notebook(tmp_path / "ret.ipynb")
    result = ip.run_cell(f"run = %submit {nb} --backend slurm\nrun")
    run = only_run()
    assert ip.user_ns["run"] == run.id and isinstance(result.result, str)
    out = capsys.readouterr().out
    assert out.startswith(f"Run {run.id} (ret) for slurm")
    assert not [line for line in out.splitlines() if line.startswith("Out[") and run.id in line], (
        "the id is printed by %submit, not again as Out[]"
    )
