"""``%%train --nproc 2``: cell start → first step, where the time goes, against plain torchrun.

A: a ``%%train --nproc N`` cell run in an IPython shell with the extension loaded (the magic's
own code path; a kernel adds only its messaging), from the moment the magic is called until
rank 0 logs its first step. Its phases: the cell body run in the kernel (objects checked before
any process starts), the export of the kernel's history, the weight hand-off file, the run's
registration and the start of torchrun (``RunLifecycle``), then torchrun → the ranks' ``start``
event (interpreter, imports and the replayed notebook in each rank, the process group) → the
first step.
B: ``torchrun --standalone --nproc-per-node N`` on the very script A exported, started directly,
until rank 0 logs its first step (the same imports and replay in each rank).
Interleaved A B A B, medians. Goal (issue 17): A ≤ B + 1 s.

    python benchmarks/nproc_startup.py [--nproc 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.first_step import first_event_time, torchrun_to_first_step  # noqa: E402

SETUP = """import torch
from torch.utils.data import TensorDataset
torch.manual_seed(0)
X = torch.randn(2048, 32); y = torch.randint(0, 4, (2048,))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
_ = torch.optim.AdamW(model.parameters())  # torch's first optimizer imports torch._dynamo (seconds): not ours to time
"""
CELL = """optimizer = torch.optim.AdamW(model.parameters(), 1e-3)
train_loader = torch.utils.data.DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
loss_fn = torch.nn.CrossEntropyLoss()
"""
PHASES: dict[str, float] = defaultdict(float)
STARTED: dict[str, float] = {}  # when each timed phase last began (wall clock)


def timed(label: str, owner, name: str) -> None:
    original = owner.__dict__[name]
    func = original.__func__ if isinstance(original, classmethod) else original

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        start, STARTED[label] = time.perf_counter(), time.time()
        try:
            return func(*args, **kwargs)
        finally:
            PHASES[label] += time.perf_counter() - start

    setattr(owner, name, classmethod(wrapper) if isinstance(original, classmethod) else wrapper)


def install_timers() -> None:
    from jiyu_magics import jobs
    from jiyu_magics.jobs import lifecycle
    from jiyu_magics.magics import ddp_launch
    from jiyu_magics.train import weight_handoff

    timed("  export (kernel history → script)", ddp_launch.DdpLaunch, "_prepare")
    timed("  run registered (RunLifecycle.register)", lifecycle.RunLifecycle, "register")
    timed("  torchrun started (RunLifecycle.start)", lifecycle.RunLifecycle, "start")
    timed("whole launch (DdpLaunch.run)", ddp_launch.DdpLaunch, "run")
    original_save = weight_handoff.save_weights

    def save_weights(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_save(*args, **kwargs)
        finally:
            PHASES["    of which: weights saved for the ranks"] += time.perf_counter() - start

    weight_handoff.save_weights = save_weights
    original_export = jobs.export_history

    def export_history(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_export(*args, **kwargs)
        finally:
            PHASES["    of which: export_history"] += time.perf_counter() - start

    jobs.export_history = export_history


def via_magic(shell, nproc: int) -> tuple[dict[str, float], str]:
    from IPython.utils.capture import capture_output

    PHASES.clear()
    line = f"--nproc {nproc} --max-steps 3 --device cpu --name nproc-startup"
    start = time.time()
    with capture_output():
        shell.run_cell_magic("train", line, CELL)
    result = shell.user_ns["train_result"]
    started = first_event_time(result.run_id, "start")
    step = first_event_time(result.run_id, "step")
    torchrun_started = (
        STARTED["  torchrun started (RunLifecycle.start)"] + PHASES["  torchrun started (RunLifecycle.start)"]
    )
    return {
        "A cell start → first step": step - start,
        "cell body and checks in the kernel": STARTED["whole launch (DdpLaunch.run)"] - start,
        **{k: v for k, v in PHASES.items() if k != "whole launch (DdpLaunch.run)"},
        "torchrun started → ranks' start event": started - torchrun_started,
        "ranks' start event → first step": step - started,
        "(whole cell, to the end of training)": time.time() - start,
    }, result.run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jiyu-bench-nproc-"))
    os.environ.setdefault("JIYU_HOME", str(tmp / "home"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["TMPDIR"] = str(tmp)
    os.chdir(tmp)
    from IPython.core.interactiveshell import InteractiveShell

    from jiyu_magics.core.runs.files import RunFiles

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jiyu_magics")
    shell.run_cell(SETUP, store_history=True)
    install_timers()
    ours, theirs = [], []
    for _ in range(args.repeat):
        figures, run_id = via_magic(shell, args.nproc)
        ours.append(figures)
        theirs.append(torchrun_to_first_step(RunFiles.of(run_id).script, args.nproc, tmp))
    print(
        f"%%train --nproc {args.nproc} (gloo, CPU) vs torchrun on the exported script: "
        f"median of {args.repeat} interleaved repetitions"
    )
    order = [
        "A cell start → first step",
        "cell body and checks in the kernel",
        "  run registered (RunLifecycle.register)",
        "  export (kernel history → script)",
        "    of which: export_history",
        "    of which: weights saved for the ranks",
        "  torchrun started (RunLifecycle.start)",
        "torchrun started → ranks' start event",
        "ranks' start event → first step",
        "(whole cell, to the end of training)",
    ]
    for key in order:
        values = [f.get(key, 0.0) for f in ours]
        print(f"  {key:<48} {statistics.median(values):7.3f} s  (all: {', '.join(f'{v:.3f}' for v in values)})")
    a = statistics.median(f["A cell start → first step"] for f in ours)
    b = statistics.median(theirs)
    print(f"  {'B torchrun (same script) → first step':<48} {b:7.3f} s")
    print(f"A - B: {a - b:+.2f} s (goal: ≤ +1 s)")


if __name__ == "__main__":
    main()
