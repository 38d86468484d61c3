"""What one panel poll costs the server on a shared box: 8 GPUs, 50 runs, 10 kernels.

One poll is ``GET /jiyu/api/gpus`` (a fresh NVML snapshot, every process mapped to its owner:
runs by pid and run id, the 10 kernels by the server's kernel map, the rest by the process
table; each GPU's leases and freedom; the kernels' memory and idle time; the usage sample
written to the store) plus ``GET /jiyu/api/runs`` (50 runs with their leases, queue positions
and cached summaries). Both are timed as the handlers call them, on this thread, without HTTP.

The 10 kernels are real ipykernel processes (jupyter_client); the GPUs come from the NVML test
double (tests/nvml_double: no driver needed), whose process lists name the kernels' pids and
the running runs' pids. 8 of the 50 runs are running and lease one GPU each. Goal: <= 10 ms.

    python benchmarks/panel_gpus.py [--repeat 51]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fake_box import GIB, populate, use_fake_box  # noqa: E402
from benchmarks.timing import timed  # noqa: E402


def start_kernels(count: int) -> list:
    from jupyter_client.manager import start_new_kernel

    return [start_new_kernel(kernel_name="python3") for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=51)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kernels", type=int, default=10)
    args = parser.parse_args()
    state = use_fake_box(args.gpus) / "nvml.json"
    os.environ["JIYU_NVML_DOUBLE_PROCESSES"] = str(state)
    from jiyu_magics.core.gpu.owners import KernelInfo
    from jiyu_magics.server.gpu_sampler import Holders, read_gpus
    from jiyu_magics.server.run_views import RunViews

    kernels = start_kernels(args.kernels)
    try:
        pids = [manager.provisioner.pid for manager, _ in kernels]
        processes: dict[str, list] = {}
        for i, pid in enumerate(pids):
            processes.setdefault(str(i % args.gpus), []).append([pid, 2 * GIB])
        live = populate(args.runs, 200, running=args.gpus, mem_peak=3 * GIB)
        for i, _ in enumerate(live):
            processes.setdefault(str(i), []).append([os.getpid(), 10 * GIB])
        state.write_text(json.dumps({"processes": processes}))
        views = RunViews(limit=args.runs)
        known = {
            pid: KernelInfo(
                f"{i:08x}-kernel",
                pid,
                notebook=f"nb{i}.ipynb",
                session_id=f"s{i}",
                execution_state="idle",
                idle_s=60.0 * i,
            )
            for i, pid in enumerate(pids)
        }
        holders = Holders(
            store=views.store, kernels=known, reported=lambda run_id: views.summary(run_id).get("mem_peak")
        )
        views.list()
        read_gpus(holders=holders)  # warm: imports, the summary cache, NVML's first init
        gpus_s, runs_s = [], []
        for _ in range(args.repeat):  # interleaved, as a panel poll does both
            gpus_s.append(timed(lambda: read_gpus(holders=holders)))
            runs_s.append(timed(views.list))
        snap = read_gpus(holders=holders)
    finally:
        for manager, client in kernels:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    owners = sum(len(d["processes"]) for d in snap["devices"])
    g, r = statistics.median(gpus_s), statistics.median(runs_s)
    print(
        f"panel poll, {args.gpus} GPUs, {args.runs} runs ({len(live)} leasing), {args.kernels} real kernels, "
        f"{owners} GPU processes, median of {args.repeat}:"
    )
    print(f"  GET gpus (fresh NVML read, owners, usage sample): {g * 1e3:6.2f} ms")
    print(f"  GET runs (50 rows, leases, summaries cached)     : {r * 1e3:6.2f} ms")
    print(f"  one poll                                        : {(g + r) * 1e3:6.2f} ms  (goal: <= 10 ms)")


if __name__ == "__main__":
    main()
