"""From a GPU freeing to the next queued job's first step, against a direct start.

A (queued): job H holds the only GPU; job Q is submitted behind it and waits queued (its
supervisor polls the run store); H ends by itself. Measured: Q's first ``step`` event minus the
moment H's lease ended (the ``ended`` time the store recorded in the transaction that ended H).
B (direct): the same job submitted while the GPU is free. Measured: its first ``step`` event
minus the moment ``jobs.submit`` was called.

Also printed: from the GPU freeing to the waiting supervisor's lease (its poll of the store).
Both go through real supervisors, torchrun and a gloo rank; the GPU comes from the NVML test
double (tests/nvml_double: one GPU, no driver needed), so the figure is the queue's own cost,
not a GPU's. Interleaved A B A B, medians, and the difference A - B (goal: at most 1 s).

    python benchmarks/queue_latency.py [--repeat 5] [--real-gpu]

``--real-gpu`` (benchmarks/gpu_checks.sh on a GPU machine) leases the machine's first real GPU
through NVML instead of the double.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = ROOT / "tests" / "nvml_double"
REAL_GPU = "--real-gpu" in sys.argv
sys.path[:0] = [str(ROOT)] if REAL_GPU else [str(DOUBLE), str(ROOT)]

from benchmarks.first_step import first_event_time, submit_to_first_step, wait_end  # noqa: E402
from jiyu_magics import jobs  # noqa: E402
from jiyu_magics.core.store.run_store import RunStore  # noqa: E402
from tests.jobs_workload import write_notebook  # noqa: E402

QUICK = {"steps": 3, "step_seconds": 0.0}
HOLD = {"steps": 30, "step_seconds": 0.1}


def queued(notebook: Path) -> tuple[float, float]:
    holder = jobs.submit(notebook, nproc=1, gpus=1, params=HOLD)
    waiting = jobs.submit(notebook, nproc=1, gpus=1, params=QUICK)
    assert RunStore().get(waiting.id).status == "queued"
    ended = wait_end(holder.id)
    freed = max(g["ended"] for g in ended.gpus)
    latency = first_event_time(waiting.id) - freed
    leased = min(g["since"] for g in RunStore().get(waiting.id).gpus) - freed
    wait_end(waiting.id)
    return latency, leased


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--real-gpu", action="store_true", help="the machine's real GPUs, not the NVML double")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ.update({"JIYU_HOME": str(tmp / "home"), "TMPDIR": str(tmp)})
        if not args.real_gpu:
            os.environ.update(
                {
                    "JIYU_NVML_DOUBLE_GPUS": "1",
                    "PYTHONPATH": os.pathsep.join([str(DOUBLE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
                }
            )
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        notebook = write_notebook(tmp / "bench.ipynb")
        a, b, lease = [], [], []
        for _ in range(args.repeat):
            latency, leased = queued(notebook)
            a.append(latency)
            lease.append(leased)
            b.append(submit_to_first_step(notebook, nproc=1, gpus=1, params=QUICK).latency)
    ma, mb = statistics.median(a), statistics.median(b)
    where = "the first real GPU" if args.real_gpu else "NVML double with 1 GPU"
    print(f"queue latency, 1 rank (gloo), {where}, {args.repeat} interleaved repetitions")
    print(f"A GPU freed -> queued job's first step: median {ma:.2f} s  (all: {', '.join(f'{x:.2f}' for x in a)})")
    print(f"B submit -> first step, GPU free:       median {mb:.2f} s  (all: {', '.join(f'{x:.2f}' for x in b)})")
    print(f"A - B: {ma - mb:+.2f} s  (goal: <= +1.00 s)")
    print(
        f"of A, GPU freed -> the waiting supervisor's lease: median {statistics.median(lease) * 1e3:.0f} ms "
        f"(all: {', '.join(f'{x * 1e3:.0f}' for x in lease)})"
    )


if __name__ == "__main__":
    main()
