"""Terminal IPython: ``%%train`` redraws one progress line in place about once a second and
keeps the final summary; where the output is not a terminal (a pipe, a job's log) it prints
plain lines every 10 s. Real IPython in a real pseudo-terminal (``pty``), real training."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

from .conftest import ROOT

CELL = (
    "import time, torch\n"
    "def train_step(model, batch):\n"
    "    time.sleep(0.05)\n"
    "    x, y = batch\n"
    "    return torch.nn.functional.mse_loss(model(x), y)\n"
    "get_ipython().run_line_magic('load_ext', 'jiyu_magics')\n"
    "get_ipython().run_cell_magic('train', '--max-steps 60 --name tty-run', "
    "'model = torch.nn.Linear(4, 1)\\noptimizer = torch.optim.SGD(model.parameters(), 0.1)\\n"
    "train_loader = [(torch.randn(8, 4), torch.randn(8, 1))] * 60')\n"
)


def _ipython(tmp_path, terminal: bool) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JIYU_HOME": str(tmp_path / "home"),
        "TERM": "xterm",
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    command = [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor", "-c", CELL]
    if not terminal:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, env=env, stdin=follower, stdout=follower, stderr=follower, cwd=tmp_path)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + 120
    poller = select.poll()
    poller.register(leader, select.POLLIN)
    while time.monotonic() < deadline:
        if poller.poll(1000):  # poll, not select: the test process may hold fds above 1024
            try:
                data = os.read(leader, 65536)
            except OSError:  # the follower side closed: the process ended
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    process.wait(10)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_terminal_redraws_one_line_in_place_and_keeps_the_summary(tmp_path):
    out = _ipython(tmp_path, terminal=True)
    redraws = out.count("\r") - out.count("\r\n")  # a pty turns "\n" into "\r\n"
    assert redraws >= 2, out  # ~3 s of training at a redraw per second
    assert "\x1b[K" in out, "each redraw clears the rest of the old line"
    lines = out.replace("\r\n", "\n").split("\n")
    progress = [line for line in lines if "\rstep " in line]
    assert progress and progress[-1].split("\r")[-1].startswith("step 60/60 (100%)"), (
        "the final progress line stays on screen"
    )
    assert any(line.startswith("Trained 60 steps") for line in lines), "the summary on its own line"


def test_a_pipe_gets_plain_lines_no_carriage_returns(tmp_path):
    out = _ipython(tmp_path, terminal=False)
    assert "\r" not in out and "\x1b[K" not in out, out
    assert "step 60/60" in out or "Trained 60 steps" in out, out
