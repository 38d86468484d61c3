"""What following Slurm runs costs, on a real one-node Slurm (tests/slurm_cluster.py).

The host's scheduler follower (``jobs.scheduler_follower``) asks Slurm about each active run every
3 s and records what it says; a panel poll (``GET /jiyu/api/runs``) only reads the store. This
holds ``--runs`` Slurm jobs pending behind a job that takes the whole node and times, in
interleaved repetitions, one follower round over all of them (one ``scontrol`` each), a panel poll
and one bare ``scontrol show job``. Prints medians and ratios. Needs Slurm installed and root (as
the tests do).

    python benchmarks/scheduler_poll.py [--runs 10] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import timed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    from tests.slurm_cluster import SlurmCluster, unavailable

    reason = unavailable()
    if reason:
        print(f"scheduler_poll: skipped: {reason}")
        return 0
    home = os.environ["JIYU_HOME"] = tempfile.mkdtemp(prefix="jiyu-bench-")
    cluster = SlurmCluster.start()
    os.environ.update(cluster.env)
    try:
        measure(cluster, args.runs, args.repeat)
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


def measure(cluster, runs: int, repeat: int) -> None:
    from jiyu_magics import jobs
    from jiyu_magics.core.store.run_store import RunStore
    from jiyu_magics.jobs import scheduler_follower
    from jiyu_magics.server.run_views import RunViews

    cluster.run("sbatch", f"--cpus-per-task={cluster.cpus}", "--output=/dev/null", "--wrap", "sleep 600", check=True)
    notebook = Path(os.environ["JIYU_HOME"]) / "nb.ipynb"
    notebook.write_text(
        '{"cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "source": "x = 1", "outputs": [], '
        '"execution_count": null}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    ids = [jobs.submit(notebook, backend="slurm", slurm={"gpus_per_node": 0}).id for _ in range(runs)]
    store, views = RunStore(), RunViews()
    job = store.get(ids[0]).scheduler_id
    follower, poll, bare = [], [], []
    for _ in range(repeat):
        follower.append(timed(lambda: scheduler_follower.follow_all(store)))
        poll.append(timed(views.list))
        bare.append(timed(lambda: subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True)))
    assert all(r.status == "queued" and r.queue_reason for r in map(store.get, ids))
    f, p, b = (statistics.median(x) * 1000 for x in (follower, poll, bare))
    print(
        f"{runs} pending Slurm runs: one follower round {f:.1f} ms ({f / runs:.1f} ms a run, "
        f"{f / runs / b:.1f}x a bare scontrol show job of {b:.1f} ms); a panel poll {p:.1f} ms, "
        f"asking Slurm nothing (median of {repeat})"
    )


if __name__ == "__main__":
    sys.exit(main())
