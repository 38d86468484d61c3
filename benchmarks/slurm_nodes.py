"""Multi-node Slurm, measured on the real two-node test cluster (tests/slurm_cluster.py): submit →
first training step on 2 nodes against 1 node (the same notebook, the same cluster), and each
staged failure → the run's end recorded with its line.

A: ``jobs.submit(notebook, nnodes=1)``; B: the same with ``nnodes=2`` (one rank per node either
way: ``--nproc 1 --gpus-per-node 0``). Each until rank 0's first ``step`` event (its own clock,
the same machine's). Interleaved A B A B, medians and the ratio B/A: what the second node costs
(its launcher's checks, the c10d rendezvous across nodes, gloo across loopback addresses).

Failures: the time from the failure (a kill -9 of rank 1 on n2; n2's slurmd killed; for a
wrong name of the first node on n2, the submission) to the run's end in the store, followed
as a user would (``jobs.resolve`` once a second: one look at Slurm every 3 s across callers).
Slurm's own node-failure detection is the cluster's SlurmdTimeout/MessageTimeout (5 s here;
Slurm's defaults are 300 s and 10 s).

Needs root, Slurm and munge (as ``make test``). ``python benchmarks/slurm_nodes.py --repeat 3``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.train_overhead import bootstrap_interval  # noqa: E402
from jiyu_magics import jobs  # noqa: E402
from jiyu_magics.jobs.process import rank_records  # noqa: E402
from tests.slurm_cluster import SlurmCluster, unavailable  # noqa: E402
from tests.slurm_workload import events, write_notebook  # noqa: E402

CPU = {"gpus_per_node": 0}


def first_step(notebook: Path, nnodes: int, timeout: float = 300) -> float:
    began = time.time()
    run = jobs.submit(notebook, backend="slurm", nnodes=nnodes, nproc=1, slurm=CPU, params={"steps": 5})
    deadline = time.monotonic() + timeout
    while not (steps := events(run.id, "step")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no step within {timeout:.0f} s: {jobs.resolve(run.id).error}")
        time.sleep(0.1)
    latency = steps[0]["t"] - began
    end(run.id)
    return latency


def end(run_id: str, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while (run := jobs.resolve(run_id)).active:
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not end within {timeout:.0f} s")
        time.sleep(1)
    return run


def long_run(tmp: Path, **slurm):
    nb = write_notebook(tmp / "long.ipynb", steps=100000, step_seconds=0.05)
    run = jobs.submit(nb, backend="slurm", nnodes=2, nproc=1, slurm={**CPU, **slurm})
    while len(events(run.id, "step")) < 3:
        time.sleep(0.2)
    return run


def failure_to_end(cluster: SlurmCluster, tmp: Path) -> list[tuple[str, float, str]]:
    found = []
    run = long_run(tmp)
    (victim,) = [r for r in rank_records.read_all(run.id) if r.host == "n2"]
    began = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    done = end(run.id)
    found.append(("kill -9 of rank 1 on n2", time.monotonic() - began, done.error))
    cluster.cancel_all()

    run = long_run(tmp)
    began = time.monotonic()
    cluster.kill_slurmd("n2")
    done = end(run.id)
    found.append(("n2's slurmd killed (NODE_FAIL)", time.monotonic() - began, done.error))
    cluster.cancel_all()
    cluster.restart_slurmd("n2")
    cluster.end_orphaned_steps()

    cluster.set_hosts("n2", {"n1": "127.0.0.1"})
    began = time.monotonic()
    run = jobs.submit(write_notebook(tmp / "short.ipynb", steps=5), backend="slurm", nnodes=2, nproc=1, slurm=CPU)
    done = end(run.id)
    found.append(("n1 -> 127.0.0.1 on n2, from submit", time.monotonic() - began, done.error))
    cluster.set_hosts("n2")
    cluster.cancel_all()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable(2)
    if reason:
        sys.exit(reason)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["JIYU_HOME"] = str(tmp / "home")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ["TMPDIR"] = str(tmp)
        cluster = SlurmCluster.start(nodes=2)
        os.environ.update(cluster.env)
        try:
            notebook = write_notebook(tmp / "bench.ipynb")
            one, two = [], []
            for _ in range(args.repeat):
                one.append(first_step(notebook, 1))
                two.append(first_step(notebook, 2))
            failures = failure_to_end(cluster, tmp)
        finally:
            cluster.stop()
    a, b = statistics.median(one), statistics.median(two)
    print(f"Slurm, one rank per node, {args.repeat} interleaved repetitions (cluster up in {cluster.started_in:.1f} s)")
    print(f"A 1 node:  submit -> first step  median {a:.2f} s  (all: {', '.join(f'{x:.2f}' for x in one)})")
    print(f"B 2 nodes: submit -> first step  median {b:.2f} s  (all: {', '.join(f'{x:.2f}' for x in two)})")
    low, high = bootstrap_interval([y / x for x, y in zip(one, two, strict=True)])
    print(
        f"ratio B/A: {b / a:.2f}  (the second node {b - a:+.2f} s; pairwise ratios' median, 90% bootstrap: "
        f"{low:.2f}-{high:.2f})"
    )
    for what, took, line in failures:
        print(f"{what}: end recorded after {took:.1f} s: {line}")


if __name__ == "__main__":
    main()
