"""What one panel poll costs the server, and what the run-summary cache saves.

``GET /jiyu/api/runs`` lists the 50 most recent runs with their progress summaries: a finished
run's is stored in its row when it ends; a running run's is folded from its event log's tail
(64 KiB read and parsed) and kept while the log's size and mtime stay the same, so a poll
re-reads only the logs that grew. This compares a poll from a fresh view (the running run's
summary folded again, the finished ones read from their rows) against a poll where the running
run's log grew since the last poll, in interleaved repetitions, and prints medians and their
ratio; then the cost of one ``/jiyu/metrics`` render from the same records.

    python benchmarks/panel_server.py [--runs 50] [--steps 5000] [--repeat 21]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fake_box import populate, use_fake_box  # noqa: E402
from benchmarks.timing import timed  # noqa: E402
from jiyu_magics.core.events.log import EventLog  # noqa: E402
from jiyu_magics.core.runs.files import RunFiles  # noqa: E402
from jiyu_magics.server import metrics  # noqa: E402
from jiyu_magics.server.run_views import RunViews  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    use_fake_box(gpus=0)  # no GPUs: the runs' summaries are what is timed
    live = populate(args.runs, args.steps, running=1, leasing=False, epoch=0, lr=1e-3)[0].id
    warm = RunViews(limit=args.runs)
    warm.list()
    grow = EventLog(RunFiles.of(live).events)
    cold_s, warm_s = [], []
    for i in range(args.repeat):  # interleaved: drift on the shared cores hits both alike
        cold_s.append(timed(lambda: RunViews(limit=args.runs).list()))
        grow.append("step", step=args.steps + i + 1, loss=0.01)
        warm_s.append(timed(warm.list))
    cold, hot = statistics.median(cold_s), statistics.median(warm_s)
    records = warm.list()
    render_s = statistics.median(
        timed(lambda: metrics.render({"available": False}, records, {"running": 1})) for _ in range(args.repeat)
    )
    size = len(metrics.render({"available": False}, records, {"running": 1}))
    print(f"GET runs, {args.runs} runs x {args.steps} step events, median of {args.repeat}:")
    print(f"  a fresh view (no cache)  : {cold * 1e3:7.2f} ms")
    print(f"  cached, one log growing  : {hot * 1e3:7.2f} ms   ({cold / hot:.1f}x faster)")
    print(f"/jiyu/metrics render from those records: {render_s * 1e3:.2f} ms, {size} bytes")


if __name__ == "__main__":
    main()
