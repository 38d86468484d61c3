"""What ``--track`` costs the training loop, and how soon a step reaches the tracker.

Overhead: the same ``fit`` (a small MLP on in-memory data, ``log_every=1``: one event per
step, the heaviest logging the engine does) with tracking off, then on, for each tracker and
each way of hosting the follower: a process of its own (what ``fit`` does) and, for
comparison, a thread in the training process. Each repetition times the steady state, from
step ``WARMUP`` to the last (set-up and the follower's start, ``import mlflow``, are outside
the window), by the wall clock and by the training process's CPU time (all its threads):
on a shared machine whose load swings the wall clock by 2x, the CPU time still says what the
loop itself spent. The follower process's CPU time is printed per step too (it runs on
another core). The variants run interleaved (A B C ..., A B C ...); we print medians and,
per variant, the median of per-repetition ratios to "off" with a bootstrap 90% interval.

Lag: a run per tracker (``--lag-steps``, long enough that the steady state starts after the
follower's own start: at 1 kHz a 6000-step run is over before ``import mlflow`` is) while
this process watches the tracker's own storage every 20 ms (the event files through
TensorBoard's ``EventFileLoader``, MLflow's SQLite store with sqlite3) and notes when each
step appears; lag = that moment minus the step event's time. Printed: the first point's delay
(the follower's start), then the median, p95 and max lag of the steady state.

    python benchmarks/tracking_overhead.py [--repeat 5] [--steps 6000] [--hidden 64] [--lag-steps 30000]
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import resource
import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from jiyu_magics.core.events.log import read_events  # noqa: E402
from jiyu_magics.core.runs.files import RunFiles  # noqa: E402
from jiyu_magics.trackers.destinations import parse_track  # noqa: E402
from jiyu_magics.trackers.follower import FollowerThread, TrackerFollower  # noqa: E402
from jiyu_magics.train import fit  # noqa: E402
from jiyu_magics.train.monitor import NullMonitor  # noqa: E402

WARMUP = 500


class Probe(NullMonitor):
    """Fed each event as the loop logs it: notes the wall clock and this process's CPU time at
    step ``WARMUP`` and at the last step (CPU time, all threads: what the training process
    spent, which the machine's other load does not inflate); for the thread variant, starts
    the follower on a thread of this process at the start event."""

    def __init__(self, track: str | None):
        self.track, self.thread = track, None
        self.first: tuple[int, float, float] | None = None
        self.last: tuple[int, float, float] | None = None

    def feed(self, events) -> None:
        for event in events:
            kind = event["kind"]
            if kind == "step" and event["step"] >= WARMUP:
                mark = (event["step"], time.perf_counter(), time.process_time())
                self.first, self.last = self.first or mark, mark
            elif kind == "start" and self.track and self.thread is None:
                follower = TrackerFollower(event["run_id"], parse_track(self.track))
                self.thread = FollowerThread(follower).start()

    def close(self) -> None:
        if self.thread is not None:
            self.thread.stop()

    def per_step(self) -> tuple[float, float]:
        """(wall, CPU) seconds per step in the window."""
        steps = self.last[0] - self.first[0]
        return (self.last[1] - self.first[1]) / steps, (self.last[2] - self.first[2]) / steps


def train(steps: int, hidden: int, track: str, thread: bool, probe: Probe | None = None) -> str:
    torch.manual_seed(0)
    x, y = torch.randn(4096, 32), torch.randint(0, 4, (4096,))
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    optimizer = torch.optim.SGD(model.parameters(), 0.01)
    monitor = probe or Probe(track if thread else None)
    result = fit(
        model,
        optimizer,
        (x, y),
        batch_size=32,
        loss_fn=nn.CrossEntropyLoss(),
        max_steps=steps,
        log_every=1,
        save_ckpts=False,
        track="none" if thread else track,
        monitor=monitor,
    )
    monitor.close()
    return result.run_id


def bootstrap(ratios: list[float], rounds: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(rounds))
    return medians[int(rounds * 0.05)], medians[int(rounds * 0.95)]


def wait_followers_done(home: Path, timeout: float = 120.0) -> None:
    """A process follower outlives ``fit`` by a moment: the next repetition starts once it exited."""
    import psutil

    def following(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE and "jiyu_magics.trackers" in process.cmdline()
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(following(p) for p in psutil.Process().children()):
        time.sleep(0.2)


def overhead(args, places: dict[str, str], home: Path) -> None:
    variants = {
        "off": ("none", False),
        "tensorboard, process": (places["tensorboard"], False),
        "mlflow, process": (places["mlflow"], False),
        "tensorboard, thread": (places["tensorboard"], True),
        "mlflow, thread": (places["mlflow"], True),
    }
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    follower_cpu: dict[str, list[float]] = {name: [] for name in variants}
    for repetition in range(args.repeat):
        for name, (track, thread) in variants.items():
            probe = Probe(track if thread else None)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            train(args.steps, args.hidden, track, thread, probe)
            wait_followers_done(home)
            time.sleep(0.5)  # the reaper thread has waited for it: its CPU time is in RUSAGE_CHILDREN
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            step_wall, step_cpu = probe.per_step()
            wall[name].append(step_wall)
            cpu[name].append(step_cpu)
            spent = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
            follower_cpu[name].append(spent / args.steps)
        print(
            f"  repetition {repetition + 1}/{args.repeat} (load {os.getloadavg()[0]:.1f}): "
            + ", ".join(f"{n} {1 / wall[n][-1]:.0f}/s" for n in variants)
        )
    print(f"\nsteady state, log_every=1 ({args.steps} steps, timed from step {WARMUP}), medians of {args.repeat}:")
    print("  (wall: steps/s and time ratio to off; cpu: the training process's CPU time per step, all threads,")
    print("   and its ratio to off; follower: the follower process's CPU per step, on another core)")
    for name in variants:
        line = (
            f"  {name:21s} wall {1 / statistics.median(wall[name]):6.0f} steps/s"
            f"  cpu {statistics.median(cpu[name]) * 1e6:7.0f} us/step"
        )
        if name != "off":
            for label, series in (("wall", wall), ("cpu", cpu)):
                ratios = [on / off for off, on in zip(series["off"], series[name], strict=True)]
                low, high = bootstrap(ratios)
                line += f"  {label} x{statistics.median(ratios):.3f} [{low:.3f}, {high:.3f}]"
            line += f"  follower {statistics.median(follower_cpu[name]) * 1e6:5.0f} us/step"
        print(line)


class Watcher:
    """Notes when each step's loss first shows in the tracker's own storage."""

    def __init__(self, kind: str, where: str):
        self.kind, self.where = kind, where
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loaders: dict[str, object] = {}

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            now = time.time()
            for step in self._new_steps():
                self.seen.setdefault(step, now)

    def _new_steps(self) -> list[int]:
        if self.kind == "mlflow":
            try:
                db = sqlite3.connect(f"file:{self.where}?mode=ro", uri=True, timeout=1)
                try:
                    rows = db.execute(
                        "SELECT step FROM metrics WHERE key = 'train/loss' AND step > ?", (max(self.seen, default=-1),)
                    ).fetchall()
                finally:
                    db.close()
            except sqlite3.Error:
                return []
            return [row[0] for row in rows]
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

        found = []
        for path in glob.glob(f"{self.where}/*/events.out.tfevents.*"):
            loader = self.loaders.setdefault(path, EventFileLoader(path))
            for event in loader.Load():
                if any(value.tag == "train/loss" for value in event.summary.value):
                    found.append(event.step)
        return found


def lag(args, home: Path) -> None:
    print("\nlag from a step's event to the tracker (a run per tracker, this process polling every 20 ms):")
    places = fresh_places(home / "lag")
    for kind in ("tensorboard", "mlflow"):
        where = places[kind].split(":", 1)[1].removeprefix("sqlite:///")
        watcher = Watcher(kind, where)
        watcher.thread.start()
        run_id = train(args.lag_steps, args.hidden, places[kind], thread=False)
        wait_followers_done(home)
        watcher.stop.set()
        watcher.thread.join()
        steps = {e["step"]: e["t"] for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "step"}
        lags = sorted(watcher.seen[s] - t for s, t in steps.items() if s in watcher.seen and s >= WARMUP)
        first = min(watcher.seen.values()) - min(steps.values())
        print(
            f"  {kind:12s} first point after {first:5.1f} s (the follower's start); steady state: "
            f"median {statistics.median(lags):.2f} s, p95 {lags[int(len(lags) * 0.95)]:.2f} s, max {lags[-1]:.2f} s "
            f"({len(lags)} of {len(steps)} steps seen)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument(
        "--lag-steps", type=int, default=30000, help="steps of each lag run (outlasting the follower's ~4 s start)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["JIYU_HOME"] = str(home)
        os.environ.pop("JIYU_TRACK", None)
        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        overhead(args, fresh_places(home / "overhead"), home)
        if not args.skip_lag:
            lag(args, home)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


def fresh_places(folder: Path) -> dict[str, str]:
    """A TensorBoard folder and an MLflow SQLite store of their own, the store made beforehand
    (its migrations take seconds, once per store)."""
    from mlflow.tracking import MlflowClient

    folder.mkdir(parents=True)
    MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments()
    return {"tensorboard": f"tensorboard:{folder / 'tb'}", "mlflow": f"mlflow:sqlite:///{folder / 'mlflow.db'}"}


if __name__ == "__main__":
    main()
