"""Read-only and full disks under ``JIYU_HOME`` (issue 24, group 7), for real: a read-only bind
mount or a full tmpfs, made in a private mount namespace (``unshare -m``) that only the command
under test sees. Every CLI command says it in one line (exit 1); ``%%train`` still trains,
unrecorded, saying so; with checkpoints on it refuses before training, in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from .cli_runner import JIYU

REQUIRE_SERVICES_ENV = "JIYU_REQUIRE_SERVICES"
MOUNT = {
    # bind the home onto itself, then make that mount read-only
    "read-only": 'mount --bind "$H" "$H" && mount -o remount,ro,bind "$H" "$H"',
    # a 256 KiB tmpfs, filled to the last byte
    "full": 'mount -t tmpfs -o size=256k tmpfs "$H" && { head -c 1M /dev/zero > "$H/fill" 2>/dev/null; true; }',
}


def _namespaces_usable() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"unshare -m is not permitted here: {done.stderr.strip()}"


@pytest.fixture(scope="module", autouse=True)
def mount_namespaces():
    reason = _namespaces_usable()
    if reason:
        if os.environ.get(REQUIRE_SERVICES_ENV) == "1":
            pytest.fail(f"{reason} ({REQUIRE_SERVICES_ENV}=1)", pytrace=False)
        pytest.skip(reason)


def under(fault: str, home, *command: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``command`` with ``JIYU_HOME=home`` on a disk with ``fault``, seen by it alone."""
    script = f'H="$1"; shift; {MOUNT[fault]} && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", str(home), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "JIYU_HOME": str(home)},
    )


@pytest.fixture
def homes(tmp_path):
    """An empty home and one holding a store with a run, both to be made read-only."""
    empty, kept = tmp_path / "empty", tmp_path / "kept"
    empty.mkdir()
    kept.mkdir()
    made = subprocess.run(
        [sys.executable, "-c", "from jiyu_magics.core.store.run_store import RunStore; RunStore().create('job', 'x')"],
        env={**os.environ, "JIYU_HOME": str(kept)},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    return {"empty": empty, "with a store": kept}


COMMANDS = [
    ["jobs"],
    ["jobs", "--all"],
    ["queue"],
    ["usage"],
    ["logs", "abc"],
    ["stop", "abc"],
    ["store", "repair"],
]


@pytest.mark.parametrize("which", ["empty", "with a store"])
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_command_says_a_read_only_home_in_one_line(homes, which, args):
    done = under("read-only", homes[which], str(JIYU), *args)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "read-only file system" in done.stderr.lower(), done.stderr


def test_doctor_names_a_read_only_home(homes):
    done = under("read-only", homes["with a store"], str(JIYU), "doctor", "--store")
    assert done.returncode == 1 and "is on a read-only file system" in done.stdout, done.stdout + done.stderr


def test_submit_says_a_full_disk_in_one_line(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), tmp_path / "nb.ipynb")
    (tmp_path / "home").mkdir()
    done = under("full", tmp_path / "home", str(JIYU), "submit", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and "full" in done.stderr, done.stderr


KERNEL = textwrap.dedent(
    """
    import sys
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "jiyu_magics")
    ip.run_cell(
        "import torch\\nmodel = torch.nn.Linear(4, 1)\\nbefore = model.weight.detach().clone()\\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\\nloss_fn = torch.nn.MSELoss()\\n"
        "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))] * 4"
    )
    result = ip.run_cell(sys.argv[1])
    trained = not ip.user_ns["model"].weight.detach().equal(ip.user_ns["before"])
    print(f"RESULT {type(result.error_in_exec).__name__} trained={trained}", flush=True)
    """
)


def kernel_cell(fault: str, home, cell: str) -> tuple[str, str]:
    """The cell run in an IPython shell on a faulty home: its 'RESULT' line and its stderr."""
    done = under(fault, home, sys.executable, "-c", KERNEL, cell)
    result = next((line for line in done.stdout.splitlines() if line.startswith("RESULT")), "")
    return result, done.stdout + done.stderr


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_train_no_ckpt_trains_unrecorded_and_says_so(tmp_path, fault):
    result, output = kernel_cell(fault, tmp_path, "%train --epochs 1 --no-ckpt")
    assert result == "RESULT NoneType trained=True", output
    assert "this run is not recorded in the run store, training goes on" in output
    assert "Traceback" not in output and "OSError" not in output, output


def test_train_with_checkpoints_on_a_read_only_home_refuses_before_training_in_one_line(tmp_path):
    result, output = kernel_cell("read-only", tmp_path, "%train --epochs 1")
    assert result == "RESULT UsageError trained=False", output
    assert "checkpoints go to the run's folder under" in output and "pass --ckpt-dir DIR" in output
    assert "Traceback" not in output


def test_a_full_disk_mid_run_loses_the_event_log_not_the_training(ip, capsys, monkeypatch):
    """The store has room, the event log runs out of it after the first events (an ENOSPC
    from the real ``os.write`` path: the log's file descriptor is swapped for /dev/full's)."""
    from jiyu_magics.core.events import log as event_log

    real_append = event_log.EventLog.append
    writes = {"n": 0}

    def append_until_full(self, kind, **fields):
        writes["n"] += 1
        if writes["n"] == 3:
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, self._fd)
            os.close(full)
        return real_append(self, kind, **fields)

    monkeypatch.setattr(event_log.EventLog, "append", append_until_full)
    ip.run_cell(
        "import torch\nmodel = torch.nn.Linear(4, 1)\nbefore = model.weight.detach().clone()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloss_fn = torch.nn.MSELoss()\n"
        "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))] * 4\n"
    )
    result = ip.run_cell("%train --epochs 2 --no-ckpt --log-every 1")
    assert result.error_in_exec is None, result.error_in_exec
    assert ip.user_ns["train_result"].status == "succeeded" and ip.user_ns["train_result"].step == 8
    err = capsys.readouterr().err
    assert "this run's event log cannot be written (No space left on device" in err and "Traceback" not in err
    assert err.count("event log cannot be written") == 1
