"""Listings as history grows: 50, 500 and 5000 finished runs of 200 events each.

For each store size, interleaved and repeated, medians:
- ``jiyu jobs --all`` and ``jiyu jobs --all --json``, each in a fresh process (what a shell pays),
  as they page by default (the 100 newest, and how many were left out);
- ``%jobs --all`` in an IPython shell with the extension loaded (the magic's own work);
- ``GET /jiyu/api/runs`` as the handler computes it (``RunViews.list`` + ``json.dumps``), its
  default page of 50;
- every run at once: ``jiyu jobs --all --limit N`` and ``GET /jiyu/api/runs?limit=N``;
- the way listings worked before summaries were stored: each run's summary folded from its event
  log (``summarize``) on every listing. The ratio old/new is printed per size.
Goal (issue 17): every listing at 5000 runs ≤ 0.3 s.

    python benchmarks/listing_history.py [--sizes 50 500 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.timing import timed  # noqa: E402
from jiyu_magics.core.events.log import EventLog, summarize  # noqa: E402
from jiyu_magics.core.runs.files import RunFiles  # noqa: E402
from jiyu_magics.core.store.run_row import Run, new_run_id  # noqa: E402
from jiyu_magics.core.store.run_store import RunStore  # noqa: E402

EVENTS_PER_RUN = 200


def template_log(folder: Path) -> bytes:
    """One finished run's event log: a start, 198 steps, an end."""
    path = folder / "template.jsonl"
    with EventLog(path) as log:
        log.append("start", total_steps=EVENTS_PER_RUN - 2, epochs=1, nproc=1, batch_size=64)
        for step in range(1, EVENTS_PER_RUN - 1):
            log.append("step", step=step, epoch=0, loss=1.0 / step, lr=1e-3, samples_per_s=1000.0)
        log.append("end", status="succeeded", step=EVENTS_PER_RUN - 2, message="done", elapsed=12.5)
    return path.read_bytes()


def populate(home: Path, count: int, log: bytes) -> None:
    """``count`` finished runs, written as a store of this version holds them (summaries
    stored when each ended), plus each run's folder with its event log."""
    os.environ["JIYU_HOME"] = str(home)
    store = RunStore()
    summary = None
    runs, now = [], time.time()
    for i in range(count):
        run_id = new_run_id()
        events = RunFiles.of(run_id).root / "events.jsonl"
        events.parent.mkdir(parents=True)
        events.write_bytes(log)
        summary = summary or json.loads(store.stored_summary(run_id))  # as the store keeps it
        created = now - (count - i) * 60
        runs.append(
            Run(
                id=run_id,
                name=f"run-{i}",
                kind="job",
                status="succeeded",
                host=store.host,
                created=created,
                started=created + 1,
                ended=created + 30,
                exit_code=0,
                params={"lr": 1e-3, "layers": [64, 128]},
                summary=summary,
            )
        )
    store.restore(runs, "a benchmark's history")


def fresh_process(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jiyu_magics", *argv], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(home: Path, count: int, repeat: int) -> dict[str, float]:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from jiyu_magics.server.run_views import RunViews
    from jiyu_magics.views import run_table

    env = {**os.environ, "JIYU_HOME": str(home), "PYTHONPATH": str(ROOT)}
    shell = InteractiveShell.instance()  # one shell for every size: load the extension into it once
    if "jiyu_magics" not in shell.extension_manager.loaded:
        shell.run_line_magic("load_ext", "jiyu_magics")
    store = RunStore()

    def old_listing() -> None:  # every run's summary folded from its log, as before schema 5
        for run in store.list(limit=count):
            run_table.row(run, summarize(RunFiles.of(run.id).events))

    def magic() -> None:
        with capture_output():
            shell.run_line_magic("jobs", "--all")

    variants = {
        "jiyu jobs --all (a page of 100)": lambda: fresh_process(["jobs", "--all"], env),
        "jiyu jobs --all --json": lambda: fresh_process(["jobs", "--all", "--json"], env),
        "%jobs --all": lambda: timed(magic),
        "GET /jiyu/api/runs (50)": lambda: timed(lambda: json.dumps(RunViews().list(), default=str)),
        "every run: jiyu jobs --all --limit N": lambda: fresh_process(["jobs", "--all", "--limit", str(count)], env),
        "every run: GET /jiyu/api/runs?limit=N": lambda: timed(
            lambda: json.dumps(RunViews().list(limit=count), default=str)
        ),
        "before: summaries from logs": lambda: timed(old_listing),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, fn in variants.items():
            times[name].append(fn())
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 500, 5000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="jiyu-bench-listing-"))
    try:
        log = template_log(scratch)
        results = {}
        for count in args.sizes:
            home = scratch / f"home-{count}"
            populate(home, count, log)
            results[count] = measure(home, count, args.repeat)
        names = list(next(iter(results.values())))
        width = max(map(len, names))
        print(f"Listings with N finished runs of {EVENTS_PER_RUN} events each (median of {args.repeat}, interleaved)")
        print(f"{'':{width}}  " + "  ".join(f"{'N=' + str(n):>9}" for n in results))
        for name in names:
            print(f"{name:{width}}  " + "  ".join(f"{results[n][name] * 1000:7.1f}ms" for n in results))
        for n, r in results.items():
            old, new = r["before: summaries from logs"], r["every run: GET /jiyu/api/runs?limit=N"]
            print(
                f"N={n}: all N summaries stored vs folded from logs: {old / new:.1f}x faster "
                f"({old * 1000:.0f} ms → {new * 1000:.0f} ms)"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
