"""Files and file names as an attacker or an accident shapes them (issue 24, groups 4 and 5):
an output path that is a device, a FIFO, a folder or a symbolic link; a notebook whose name
holds a newline and Python code; names with escape codes in listings."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .server_fixtures import server_config

INJECTED_NAME = 'inj\nprint("INJECTED")\n#.ipynb'


@pytest.fixture
def jp_server_config():
    return server_config()


def notebook(path, source: str = "x = 1", tags=()) -> str:
    cell = new_code_cell(source)
    if tags:
        cell.metadata["tags"] = list(tags)
    nbformat.write(new_notebook(cells=[new_code_cell("y = 0"), cell]), path)
    return str(path)


def special_files(tmp_path) -> dict[str, str]:
    """A character device (a copy of /dev/null's numbers, in the test's folder), a FIFO, a
    folder and a socket-free set of what ``-o`` must never replace."""
    device = tmp_path / "device"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "folder").mkdir()
    return {"device": str(device), "fifo": str(fifo), "folder": str(tmp_path / "folder")}


@pytest.mark.parametrize("command", ["export", "plot"])
@pytest.mark.parametrize("kind, words", [("device", "is a device"), ("fifo", "is a FIFO"), ("folder", "is a folder")])
def test_output_paths_that_are_not_regular_files_are_refused_in_one_line(tmp_path, command, kind, words):
    target = special_files(tmp_path)[kind]
    before = os.lstat(target)
    args = ["export", notebook(tmp_path / "nb.ipynb"), "-o", target] if command == "export" else _plot_args(target)
    done = jiyu(*args, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    after = os.lstat(target)
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino), "it was replaced"


@pytest.mark.parametrize("command", ["export", "plot"])
def test_a_symbolic_link_is_refused_unless_forced_and_then_its_target_is_written(tmp_path, command):
    real = tmp_path / "real.out"
    real.write_text("old")
    link = tmp_path / "link.out"
    link.symlink_to(real)
    args = ["export", notebook(tmp_path / "nb.ipynb"), "-o", str(link)] if command == "export" else _plot_args(link)
    refused = jiyu(*args, timeout=60)
    assert refused.returncode == 2 and "is a symbolic link; pass --force" in refused.stderr, refused.stderr
    assert real.read_text() == "old" and link.is_symlink()
    forced = jiyu(*args, "--force", timeout=60)
    assert forced.returncode == 0, forced.stderr
    assert link.is_symlink() and os.readlink(link) == str(real), "the link itself must stay a link"
    assert real.read_bytes() != b"old"


def test_a_regular_file_is_replaced_whole_keeping_its_mode(tmp_path):
    out = tmp_path / "job.py"
    out.write_text("old")
    out.chmod(0o640)
    done = jiyu("export", notebook(tmp_path / "nb.ipynb"), "-o", str(out), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "x = 1" in out.read_text() and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


_plot_run: dict[str, str] = {}


def _plot_args(target) -> list[str]:
    """``jiyu plot RUN -o TARGET`` of a run that logged a loss."""
    from jiyu_magics.core.events.log import EventLog

    run = RunStore().create("kernel", "plotted", status="running")
    with EventLog(RunFiles.of(run.id).create().events) as log:
        log.append("start", total_steps=3)
        for step in (1, 2, 3):
            log.append("step", step=step, loss=1.0 / step)
    return ["plot", run.id, "-o", str(target)]


# -- names that inject ---------------------------------------------------------------------------


def test_a_notebook_named_with_code_exports_a_script_that_runs_none_of_it(tmp_path):
    path = notebook(tmp_path / INJECTED_NAME, tags=['t\nprint("TAG INJECTED")'])
    out = tmp_path / "job.py"
    done = jiyu("export", path, "-o", str(out), timeout=60)
    assert done.returncode == 0, done.stderr
    script = out.read_text()
    compile(script, "job.py", "exec")
    assert not any(line.startswith(('print("INJECTED")', 'print("TAG INJECTED")')) for line in script.splitlines())
    ran = subprocess.run([sys.executable, str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ran.returncode == 0 and "INJECTED" not in ran.stdout + ran.stderr, ran.stderr
    assert "inj\\nprint" in script  # the name is still there, escaped inside its comment


def test_a_submitted_notebook_named_with_code_runs_none_of_it_and_lists_as_one_line(tmp_path, torchrun_tmp):
    from .jobs_workload import finished

    path = notebook(tmp_path / INJECTED_NAME, source="print('the job ran')")
    done = jiyu("submit", path, "--gpus", "0", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\nprint(" not in done.stdout and 'inj\\nprint("INJECTED")\\n#' in done.stdout
    run = RunStore().list()[0]
    assert run.name == 'inj?print("INJECTED")?#', "the default name follows the one name rule"
    ended = finished(run.id)
    log = RunFiles.of(run.id).log.read_text()
    assert ended.status == "succeeded" and "the job ran" in log and "INJECTED" not in log.replace(run.name, "")
    listing = jiyu("jobs", "--all")
    assert listing.stdout.count("\n") == 3, listing.stdout  # header, rule, one row


def test_control_characters_in_stored_names_never_reach_the_terminal_raw():
    """A row written by an older jiyu, or straight into the store: the listing escapes it."""
    RunStore().create("job", "ok", status="running")
    with RunStore().db.write() as db:
        db.execute("UPDATE runs SET name = ?, error = ?", ("evil\x1b[2J\nname", "bad\rline"))
    listing = jiyu("jobs", "--all")
    assert "\x1b" not in listing.stdout and "\r" not in listing.stdout
    assert "evil\\x1b[2J\\nname" in listing.stdout and listing.stdout.count("\n") == 3
    assert json.loads(jiyu("jobs", "--all", "--json").stdout)[0]["name"] == "evil\x1b[2J\nname"  # JSON keeps it


def test_default_names_from_model_classes_follow_the_name_rule(ip):
    ip.run_cell(
        "import torch\nEvil = type('Evil\\nClass\\x1b[31m', (torch.nn.Linear,), {})\nmodel = Evil(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloss_fn = torch.nn.MSELoss()\n"
        "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))]\n"
    )
    result = ip.run_cell("%train --max-steps 1 --no-ckpt")
    assert result.error_in_exec is None, result.error_in_exec
    assert RunStore().list()[0].name == "Evil?Class?[31m"


def test_a_slurm_script_refuses_a_folder_with_a_newline(tmp_path, no_schedulers):
    folder = tmp_path / "a\nb"
    folder.mkdir()
    path = notebook(folder / "nb.ipynb")
    done = jiyu("submit", path, "--backend", "slurm", "--gpus-per-node", "0", timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot go into a Slurm batch script" in done.stderr


def test_a_kubernetes_manifest_keeps_an_injected_name_inside_its_strings(tmp_path, no_schedulers):
    import yaml

    path = notebook(tmp_path / INJECTED_NAME)
    done = jiyu("submit", path, "--backend", "kubernetes", timeout=60)
    assert done.returncode == 0, done.stderr
    run = RunStore().list()[0]
    text = (RunFiles.of(run.id).root / "kubernetes.yaml").read_text()
    assert not any(line.startswith('print("INJECTED")') for line in text.splitlines())
    documents = list(yaml.safe_load_all(text))
    assert documents[1]["metadata"]["name"] == f"jiyu-{run.id}"


async def test_the_rest_submission_of_a_notebook_named_with_code_runs_none_of_it(jp_fetch, jp_root_dir, torchrun_tmp):
    from .jobs_workload import finished

    notebook(jp_root_dir / INJECTED_NAME)
    reply = await jp_fetch(
        "jiyu", "api", "runs", method="POST", body=json.dumps({"notebook": INJECTED_NAME, "gpus": 0}).encode()
    )
    run_id = json.loads(reply.body)["id"]
    script = RunFiles.of(run_id).script.read_text()
    assert not any(line.startswith('print("INJECTED")') for line in script.splitlines())
    RunStore().request_stop(run_id, 0)
    finished(run_id)
