"""A jiyu home is its user's alone: another Unix user of the machine reads neither the run store
nor a job's ``job.py``, log or checkpoints (issue 36: folders were 0755 and files 0644, and a
second user read the notebook's code and copied checkpoints).

A real second user, made with ``useradd`` for the test and removed after it (also when it
fails), tries as itself (``runuser``) on a home that jiyu made under a folder everyone may
enter, after a real job (``jiyu submit``) ran there."""

from __future__ import annotations

import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore

from .cli_runner import jiyu
from .jobs_workload import write_notebook
from .trackers_tools import wait_for

CLEAN_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder any user may enter and list (0755), as a home's parent often is."""
    folder = Path(tempfile.mkdtemp(prefix="jiyu-private-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(name: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", name, "--", "env", "-i", CLEAN_PATH, *command], capture_output=True, text=True, timeout=30
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_another_user_reads_nothing_of_a_jiyu_home(other_user, open_folder, monkeypatch, torchrun_tmp):
    home = open_folder / "home"
    monkeypatch.setenv("JIYU_HOME", str(home))
    notebook = write_notebook(open_folder / "train.ipynb")
    done = jiyu("submit", str(notebook), "--gpus", "0", "-p", "steps", "8", cwd=open_folder)
    assert done.returncode == 0, done.stderr
    run = RunStore().list()[0]
    wait_for(lambda: not RunStore().get(run.id).active, timeout=180, message="the job to end")
    files = RunFiles.of(run.id)
    checkpoint = next(files.ckpt.iterdir())
    assert RunStore().get(run.id).status == "succeeded" and files.script.exists() and files.log.exists()

    assert {p.name: mode(p) for p in (home, home / "runs", files.root, files.ckpt)} == {
        "home": 0o700,
        "runs": 0o700,
        run.id: 0o700,
        "ckpt": 0o700,
    }
    assert mode(home / "jiyu.sqlite") == 0o600
    for path in (home / "jiyu.sqlite", files.script, files.log, files.events, checkpoint):
        read = as_user(other_user, "cat", str(path))
        assert read.returncode != 0 and "Permission denied" in read.stderr, (path, read.stdout[:200])
    copied = as_user(other_user, "cp", str(checkpoint), "/tmp/")
    assert copied.returncode != 0 and "Permission denied" in copied.stderr
    listed = as_user(other_user, "ls", str(home))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr
    assert as_user(other_user, "ls", str(open_folder)).returncode == 0, "the user can look where the home is"
