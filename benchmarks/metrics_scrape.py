"""What one Prometheus scrape of ``/jiyu/metrics`` costs the server with 8 GPUs and 50 runs.

A scrape does what ``MetricsHandler.get`` does: the GPU snapshot with owners (reused for
``refresh_interval``, so at most one NVML read per interval however often Prometheus scrapes),
the 50 most recent runs with their summaries (cached per event log: a log that did not grow is
not read again), the counts by status, the GPU-seconds per GPU, and the exposition text. The
GPUs are the NVML test double's (``JIYU_NVML_DOUBLE_GPUS=8``: eight H100s): its reads cost
microseconds where a real driver's cost milliseconds per device, so the snapshot line is a
lower bound; everything else is the real code. 8 of the 50 runs are running, each leasing a GPU
(one of them stalled), with ``--steps`` step events each. Medians of ``--repeat`` interleaved
repetitions; the output's size is what Prometheus ingests per scrape.

    python benchmarks/metrics_scrape.py [--runs 50] [--gpus 8] [--steps 2000] [--repeat 31]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fake_box import populate, use_fake_box  # noqa: E402
from benchmarks.timing import timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    use_fake_box(args.gpus)
    live = populate(args.runs, args.steps, running=args.gpus, epoch=1, lr=1e-3)
    from jiyu_magics.core.store.run_store import RunStore
    from jiyu_magics.server import metrics
    from jiyu_magics.server.gpu_sampler import Holders, doctor_finding, read_gpus
    from jiyu_magics.server.run_views import RunViews

    views, store = RunViews(limit=args.runs), RunStore()
    holders = Holders(store=store)
    finding = doctor_finding  # asked only when NVML sees no GPU
    store.mark_stalled(live[0].id, time.time() - 600)  # one of the running ones
    snapshot = read_gpus(finding, holders)
    records, counts, usage = views.list(), views.status_counts(), views.gpu_seconds()
    parts = {
        "GPU snapshot with owners (once per refresh_interval)": lambda: read_gpus(finding, holders),
        "50 runs with summaries (cached)": views.list,
        "50 runs with summaries (cold)": lambda: RunViews(limit=args.runs).list(),
        "counts + GPU-seconds (SQLite)": lambda: (views.status_counts(), views.gpu_seconds()),
        "render, jiyu names": lambda: metrics.render(snapshot, records, counts, usage=usage),
        "render, jiyu + DCGM names": lambda: metrics.render(snapshot, records, counts, usage=usage, gpu_names="both"),
    }
    times: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(args.repeat):  # interleaved: drift on shared cores hits every part alike
        for name, fn in parts.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(values) for name, values in times.items()}
    text = metrics.render(snapshot, records, counts, usage=usage)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"/jiyu/metrics with {args.gpus} GPUs (NVML double) and {args.runs} runs "
        f"({args.gpus} running), median of {args.repeat}:"
    )
    for name, value in medians.items():
        print(f"  {name:<52} {value * 1e3:7.2f} ms")
    scrape = (
        medians["50 runs with summaries (cached)"]
        + medians["counts + GPU-seconds (SQLite)"]
        + medians["render, jiyu names"]
    )
    print(f"  a scrape within the snapshot's refresh interval      {scrape * 1e3:7.2f} ms")
    print(f"  output: {len(text)} bytes, {series} samples")


if __name__ == "__main__":
    main()
