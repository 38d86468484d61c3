"""Start → rank 0's first training step, for the start-up benchmarks (submit, queue, ``--nproc``).

Every figure is read from the run's own event log: the time of its first ``step`` event (written
by rank 0) minus the moment the start was asked for, so a job and plain torchrun are timed alike.
jiyu_magics is imported only when a function is called, so importing this module loads nothing
of the package before a benchmark has set its environment (``JIYU_HOME``, the NVML double).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple


class Submitted(NamedTuple):
    latency: float  # seconds from the call of jobs.submit to rank 0's first step
    returned: float  # seconds until jobs.submit returned
    run_id: str


def first_event_time(run_id: str, kind: str = "step", timeout: float = 300) -> float:
    """The time of the run's first ``kind`` event, polled every 20 ms."""
    from jiyu_magics.core.events.log import read_events
    from jiyu_magics.core.runs.files import RunFiles

    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [e["t"] for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == kind]
        if found:
            return found[0]
        time.sleep(0.02)
    raise TimeoutError(f"run {run_id} logged no {kind}")


def wait_end(run_id: str, timeout: float = 300):
    """The run's row once it is no longer active (so the next repetition starts on an idle box)."""
    from jiyu_magics.core.store.run_store import RunStore

    deadline = time.time() + timeout
    while time.time() < deadline:
        run = RunStore().get(run_id)
        if not run.active:
            return run
        time.sleep(0.1)
    raise TimeoutError(f"run {run_id} did not end")


def submit_to_first_step(notebook: Path, **options) -> Submitted:
    """``jobs.submit(notebook, **options)`` timed to rank 0's first step; returns once the run ended."""
    from jiyu_magics import jobs

    start = time.time()
    run = jobs.submit(notebook, **options)
    returned = time.time() - start
    latency = first_event_time(run.id) - start
    wait_end(run.id)
    return Submitted(latency, returned, run.id)


def torchrun_to_first_step(script: Path, nproc: int, cwd: Path) -> float:
    """``torchrun --standalone --nproc-per-node N script`` started directly (no supervisor), timed
    to rank 0's first step: the script logs into a run row made for it, as a job's does."""
    from jiyu_magics.core.runs.files import RunFiles
    from jiyu_magics.core.store.run_store import RunStore

    run = RunStore().create("ddp", "bench-torchrun", status="running")
    RunFiles.of(run.id).create()
    env = {**os.environ, "JIYU_RUN_ID": run.id, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    start = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(script)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    latency = first_event_time(run.id) - start
    proc.wait(300)
    RunStore().finish(run.id, "succeeded", proc.returncode)
    return latency
