"""Three users, ten jobs each, four GPUs: the box's book against each user's own home.

Every job is a process of its user (the benchmark runs as root and gives each job its user's
uid, so the book keeper learns it from the socket as it would from a login), with a run in its
user's own ``JIYU_HOME``; it waits in the queue exactly as a job's supervisor does
(``GpuQueue.try_place`` at the supervisor's poll interval), holds its GPU for a while (a
random 1-3 s, the same draws in both modes), and ends as a supervisor ends it (``finish``,
which releases the lease). The users submit one after the other, alice's ten first: the worst
case for first-come order. The GPUs are the NVML test double's (no driver here), so what is
measured is the book's arbitration, not a GPU.

Two modes, in one run: ``homes`` (no box: each user's leases in their own run store, as before
the box) and ``box`` (one book keeper for all). Printed: GPU-seconds leased twice at once and the
most holders one GPU had (a double lease), how far one user's starts ran ahead of another's
(fair order), each user's mean wait, and from a GPU freeing to the next lease on it (the
waiting head's poll and the keeper's answer), plus one keeper request and one queue poll.

    sudo python benchmarks/box_sharing.py [--users 3] [--jobs 10] [--gpus 4]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = ROOT / "tests" / "nvml_double"
sys.path[:0] = [str(DOUBLE), str(ROOT)]
from tests.unix_users import user_python  # noqa: E402

FIRST_UID = 61001
NAMES = ["alice", "bob", "carol", "dave", "erin"]


def job(run_name: str, hold: float) -> None:
    """One job as its supervisor would run it; prints its record as one JSON line."""
    from jiyu_magics.core.processes.info import process_start_time
    from jiyu_magics.core.store.run_store import RunStore
    from jiyu_magics.jobs.gpu_queue import GpuQueue

    store = RunStore()
    me, started = os.getpid(), process_start_time(os.getpid())
    run = store.create(
        "job", run_name, gpus_requested=1, pid=me, pid_started=started, owner_pid=me, owner_started=started
    )
    queued = time.time()
    queue = GpuQueue(store)
    while True:
        grant = queue.try_place(run.id)
        if grant is not None:
            break
        time.sleep(queue.poll_interval(run.id))
    leased = time.time()
    store.mark_running(run.id, pid=me)
    time.sleep(hold)
    released = time.time()
    store.finish(run.id, "succeeded", exit_code=0)
    record = {"run": run.id, "uid": os.getuid(), "queued": queued, "leased": leased, "released": released}
    print(json.dumps({**record, "gpu": grant.leases[0].uuid}), flush=True)


def run_mode(mode: str, args, holds: list[list[float]], scratch: Path, python: Path) -> list[dict]:
    folder = scratch / mode
    folder.mkdir(mode=0o755)
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{DOUBLE}",
        "JIYU_NVML_DOUBLE_GPUS": str(args.gpus),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("JIYU_BOX", None)
    if mode == "box":
        env["JIYU_BOX"] = str(folder / "box")
        subprocess.run(
            [sys.executable, "-m", "jiyu_magics", "box", "init", "--path", str(folder / "box")],
            check=True,
            env=env,
            capture_output=True,
        )
    procs = []
    for user in range(args.users):
        uid = FIRST_UID + user
        home = folder / f"home-{user}"
        home.mkdir(mode=0o700)
        os.chown(home, uid, uid)
        for index in range(args.jobs):
            procs.append(
                subprocess.Popen(
                    [str(python), __file__, "--job", f"{NAMES[user]}-{index}", str(holds[user][index])],
                    env={**env, "JIYU_HOME": str(home), "HOME": str(home)},
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=home,
                    preexec_fn=_become(uid),
                )
            )
            time.sleep(0.05)  # submitted in this order: alice's ten, then bob's, then carol's
    records = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"a job failed (exit {proc.returncode})"
        records.append(json.loads(out.strip().splitlines()[-1]))
    if mode == "box":
        book = _book_leases(folder / "box")
        records = _with_book_times(records, book)
        subprocess.run(
            [sys.executable, "-m", "jiyu_magics", "box", "stop", "--path", str(folder / "box")],
            env=env,
            capture_output=True,
        )
    return records


def _become(uid: int):
    def switch() -> None:
        os.setgid(uid)
        os.setgroups([])
        os.setuid(uid)

    return switch


def _book_leases(box: Path) -> list[sqlite3.Row]:
    db = sqlite3.connect(f"file:{box / 'book.sqlite'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db.execute("SELECT * FROM leases ORDER BY since").fetchall()


def _with_book_times(records: list[dict], book: list[sqlite3.Row]) -> list[dict]:
    """The book's own lease times (the keeper's clock, in the transactions) for each job."""
    by_run = {(row["uid"], row["run_id"]): row for row in book}
    for record in records:
        row = by_run[record["uid"], record["run"]]
        record.update(book_since=row["since"], book_ended=row["ended"])
    return records


def double_leased(records: list[dict]) -> tuple[float, int]:
    """GPU-seconds during which a GPU had more than one holder, and the most it had at once."""
    overlap, most = 0.0, 1
    for gpu in {r["gpu"] for r in records}:
        edges = sorted(
            [(r["leased"], 1) for r in records if r["gpu"] == gpu]
            + [(r["released"], -1) for r in records if r["gpu"] == gpu]
        )
        holders, last = 0, None
        for when, step in edges:
            if holders > 1 and last is not None:
                overlap += when - last
            holders += step
            most = max(most, holders)
            last = when
    return overlap, most


def fair_starts(records: list[dict], tie_s: float = 0.5) -> tuple[int, int]:
    """Starts made while several users waited, and how many of them went to the waiting user
    with the fewest GPU-seconds so far (the fair-share rule; within ``tie_s`` counts as a tie)."""
    contested = fair = 0
    for record in sorted(records, key=lambda r: r["leased"]):
        when = record["leased"]
        waiting = {r["uid"] for r in records if r["queued"] <= when < r["leased"] or r is record}
        if len(waiting) < 2:
            continue
        used = {
            uid: sum(max(0.0, min(r["released"], when) - r["leased"]) for r in records if r["uid"] == uid)
            for uid in waiting
        }
        contested += 1
        fair += used[record["uid"]] <= min(used.values()) + tie_s
    return fair, contested


def lease_latency(records: list[dict]) -> list[float]:
    """From a lease's end on a GPU (the book's clock) to the next lease on that GPU, where the
    next job was already waiting when the GPU freed (a hand-over, not an idle GPU)."""
    gaps = []
    for gpu in {r["gpu"] for r in records}:
        on = sorted((r for r in records if r["gpu"] == gpu), key=lambda r: r["book_since"])
        gaps += [
            b["book_since"] - a["book_ended"] for a, b in zip(on, on[1:], strict=False) if b["queued"] < a["book_ended"]
        ]
    return gaps


def keeper_request_s(scratch: Path, count: int = 200) -> float:
    """One ``status`` request to a keeper with nothing in its book."""
    from jiyu_magics.core.box import admin
    from jiyu_magics.core.box.client import BoxClient
    from jiyu_magics.core.box.location import BoxLocation

    started = admin.init(scratch / "probe")
    client, times = BoxClient(BoxLocation(scratch / "probe")), []
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            client.call("status")
            times.append(time.perf_counter() - t0)
    finally:
        admin.stop(started.location.root)
    return statistics.median(times)


def report(args, results: dict[str, list[dict]], request_s: float) -> None:
    print(
        f"{args.users} users x {args.jobs} jobs on {args.gpus} GPUs, each job holding 1 GPU for 1-3 s "
        f"(submitted user by user: {NAMES[0]}'s {args.jobs} first)"
    )
    print(f"{'':34}{'homes (no box)':>16}{'box':>10}")
    rows = {mode: double_leased(records) for mode, records in results.items()}
    print(f"{'GPU-seconds leased twice at once':34}{rows['homes'][0]:>16.1f}{rows['box'][0]:>10.1f}")
    print(f"{'most holders of one GPU at once':34}{rows['homes'][1]:>16}{rows['box'][1]:>10}")
    fair = {mode: "{}/{}".format(*fair_starts(records)) for mode, records in results.items()}
    print(f"{'starts to the least-served waiter':34}{fair['homes']:>16}{fair['box']:>10}")
    for user in range(args.users):
        waits = {
            mode: statistics.mean(r["leased"] - r["queued"] for r in records if r["uid"] == FIRST_UID + user)
            for mode, records in results.items()
        }
        label = f"mean wait of {NAMES[user]} (s)"
        print(f"{label:34}{waits['homes']:>16.1f}{waits['box']:>10.1f}")
    box = results["box"]
    gaps = sorted(lease_latency(box))
    order = "".join(NAMES[r["uid"] - FIRST_UID][0] for r in sorted(box, key=lambda r: r["leased"]))
    print(f"box start order by user: {order}")
    print(
        f"box: a GPU freeing -> the next lease on it: median {statistics.median(gaps) * 1000:.0f} ms, "
        f"p90 {gaps[int(len(gaps) * 0.9)] * 1000:.0f} ms ({len(gaps)} hand-overs)"
    )
    print(f"one keeper request (status): median {request_s * 1000:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--job", nargs=2, metavar=("NAME", "HOLD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        job(args.job[0], float(args.job[1]))
        return
    if os.getuid() != 0:
        sys.exit("run as root: each job runs as its own user (uids 61001...), as on a shared box")
    os.environ["PYTHONPATH"] = f"{ROOT}:{DOUBLE}"  # the keepers this starts run this tree
    rng = random.Random(args.seed)
    holds = [[round(rng.uniform(1.0, 3.0), 2) for _ in range(args.jobs)] for _ in range(args.users)]
    scratch = Path(tempfile.mkdtemp(prefix="jiyu-box-bench-"))
    os.chmod(scratch, 0o755)
    try:
        python = user_python(scratch / "python")  # this interpreter may sit in root's private home
        results = {mode: run_mode(mode, args, holds, scratch, python) for mode in ("homes", "box")}
        request_s = keeper_request_s(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(args, results, request_s)


if __name__ == "__main__":
    main()
