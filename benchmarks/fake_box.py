"""A fake shared GPU box for the server benchmarks: GPUs from the NVML test double, runs in a real store.

The GPUs are tests/nvml_double's (``JIYU_NVML_DOUBLE_GPUS`` of them, H100s, no driver needed):
their reads cost microseconds where a real driver's cost milliseconds per device, so what the
benchmarks time is the server's own code. The runs are real rows of a real ``RunStore`` under a
fresh ``JIYU_HOME``, each with a real event log; the running ones name this process as their pid
(so nothing sees them as dead) and lease one GPU each, as on a box shared by a team.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NVML_DOUBLE = ROOT / "tests" / "nvml_double"
GIB = 2**30


def use_fake_box(gpus: int) -> Path:
    """Points this process at a fresh ``JIYU_HOME`` and, with ``gpus``, that many GPUs of the NVML
    double. Call it before anything imports pynvml: the double must come first on ``sys.path``.
    Returns the scratch folder (the home is its ``home``): a place for the double's process
    lists too (``JIYU_NVML_DOUBLE_PROCESSES``, see tests/nvml_double/pynvml.py)."""
    scratch = Path(tempfile.mkdtemp(prefix="jiyu-bench-"))
    os.environ["JIYU_HOME"] = str(scratch / "home")
    if gpus:
        os.environ["JIYU_NVML_DOUBLE_GPUS"] = str(gpus)
        sys.path.insert(0, str(NVML_DOUBLE))
    return scratch


def populate(runs: int, steps: int, *, running: int, leasing: bool = True, **step_fields) -> list:
    """``runs`` job runs from notebooks, with a ``start`` and ``steps`` step events each (plus
    ``step_fields`` in every step), all finished but the last ``running``, which stay running
    and, with ``leasing``, lease one GPU each, GPU 0 upwards. Returns those running runs."""
    from jiyu_magics.core.events.log import EventLog
    from jiyu_magics.core.processes.info import process_start_time
    from jiyu_magics.core.runs.files import RunFiles
    from jiyu_magics.core.store.leases import GpuSlot
    from jiyu_magics.core.store.run_store import RunStore

    store, pid, live = RunStore(), os.getpid(), []
    for i in range(runs):
        run = store.create(
            "job",
            f"run-{i}",
            status="running",
            pid=pid,
            pid_started=process_start_time(pid),
            notebook=f"/lab/nb{i % 7}.ipynb",
            gpus_requested=1 if leasing else None,
        )
        with EventLog(RunFiles.of(run.id).create().events) as log:
            log.append("start", total_steps=2 * steps)
            for step in range(1, steps + 1):
                log.append("step", step=step, loss=1.0 / step, samples_per_s=1000.0, **step_fields)
        if i < runs - running:
            store.finish(run.id, "succeeded", exit_code=0)
            continue
        if leasing:
            store.leases.record(run.id, GpuSlot(f"GPU-00000000-0000-0000-0000-{len(live):012d}", len(live)))
        live.append(run)
    return live
