"""Every rank's stack, taken by the run's owner: ``runs/<id>/stacks/<time>/rank<N>.txt``.

Each launched rank's engine has registered ``faulthandler`` on ``STACK_SIGNAL`` into its own
``stacks/rank<N>.live`` file (``train.stack_signal``); the owner notes each file's size, sends
the signal to every live rank that registered (never to one that did not: the signal's default
would end it), waits until the files stop growing, and copies what each rank appended. Where
``py-spy`` is installed (an optional extra; it needs ptrace permission) its ``dump --native``
follows, for the frames faulthandler cannot see (C++ inside a collective).

Ranks on other machines (the nodes of a Slurm or Kubernetes job) cannot be signalled from here:
the owner writes a new request into ``stacks/request`` on the shared run folder instead, which
each rank watches (``train.stack_signal``), and waits a little longer for their dumps. The dump
folder's ``hosts.json`` says which host each rank ran on.

A rank stopped by SIGSTOP (Ctrl-Z, a debugger: state ``T`` in ``/proc/PID/stat``) runs no code,
so it dumps nothing until it is continued: its file says it is stopped (``STOPPED_MARK``), and
the views say so rather than "outside Python".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from ..core.runs.files import STACK_SIGNAL_NAME, RunFiles
from ..core.runs.model import RankState
from ..core.runs.stack_groups import HOSTS_FILE, STOPPED_MARK
from .process import rank_records

WAIT_S = 3.0  # for every rank's dump to arrive
REMOTE_WAIT_S = 6.0  # ranks elsewhere look for a request once a second, over a shared folder
SETTLE_S = 0.3  # files unchanged this long: the dumps are complete
PY_SPY_TIMEOUT_S = 20.0


def dump_stacks(run_id: str, now: float | None = None) -> Path | None:
    """The folder of this dump, or None when no live rank can be asked (none registered yet)."""
    files = RunFiles.of(run_id)
    ranks = [
        r for r in rank_records.read_all(run_id) if r.state is RankState.RUNNING and files.stack_live(r.rank).exists()
    ]
    if not ranks:
        return None
    offsets = {r.rank: files.stack_live(r.rank).stat().st_size for r in ranks}
    elsewhere = [r for r in ranks if not r.here]
    if elsewhere:
        files.stack_request.write_text(f"{time.time_ns()} {os.getpid()}\n")
    stopped = {r.rank: state for r in ranks if r.here and (state := stopped_state(r.pid))}
    asked = elsewhere + [r for r in ranks if r.here and r.rank not in stopped and _signal(r.pid)]
    wait = REMOTE_WAIT_S if elsewhere else WAIT_S
    _wait_until_settled({files.stack_live(r.rank): offsets[r.rank] for r in asked}, wait)
    folder = _new_folder(files.stacks, now or time.time())
    partial = folder.with_name(f".{folder.name}.partial")  # renamed when whole: a reader never sees half
    partial.mkdir(parents=True)
    folder, final = partial, folder
    for rank, state in stopped.items():
        (folder / f"rank{rank}.txt").write_text(f"{STOPPED_MARK} {state}\n")
    for record in asked:
        text = _appended(files.stack_live(record.rank), offsets[record.rank])
        if record.here:
            text += _native_frames(record.pid)
        if text:
            (folder / f"rank{record.rank}.txt").write_text(text)
    if elsewhere:  # where each rank ran, for a dump across machines
        (folder / HOSTS_FILE).write_text(json.dumps({str(r.rank): r.host for r in asked if r.host}))
    os.replace(partial, final)
    return final


def stopped_state(pid: int) -> str | None:
    """``T`` (stopped: SIGSTOP, Ctrl-Z) or ``t`` (stopped by a tracer) when the process is
    stopped, else None: the state field of ``/proc/PID/stat``, through psutil."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    return {psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t"}.get(status)


def _signal(pid: int) -> bool:
    try:
        os.kill(pid, getattr(signal, STACK_SIGNAL_NAME))
        return True
    except OSError:
        return False  # it ended since its record was read


def _wait_until_settled(offsets: dict[Path, int], wait: float = WAIT_S) -> None:
    """Until every file grew past its offset and none changed for ``SETTLE_S``, at most ``wait``."""
    deadline, last, steady_since = time.monotonic() + wait, None, time.monotonic()
    while time.monotonic() < deadline:
        sizes = [path.stat().st_size for path in offsets]
        grown = all(size > offset for size, offset in zip(sizes, offsets.values(), strict=False))
        if sizes != last:
            last, steady_since = sizes, time.monotonic()
        elif grown and time.monotonic() - steady_since >= SETTLE_S:
            return
        time.sleep(0.05)


def _new_folder(stacks: Path, now: float) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
    folder, n = stacks / stamp, 1
    while folder.exists():
        n += 1
        folder = stacks / f"{stamp}-{n}"
    return folder  # the name of the next dump, made by renaming its partial folder


def _appended(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def _native_frames(pid: int) -> str:
    """``py-spy dump --native``'s view, or nothing where py-spy is missing or not allowed."""
    beside = Path(sys.executable).with_name("py-spy")  # installed in this environment, not on PATH
    tool = str(beside) if os.access(beside, os.X_OK) else shutil.which("py-spy")
    if tool is None:
        return ""
    try:
        done = subprocess.run(
            [tool, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=PY_SPY_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    body = done.stdout if done.returncode == 0 else done.stderr
    return f"\n--- py-spy dump --native (exit {done.returncode}) ---\n{body}"
