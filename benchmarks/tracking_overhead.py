"""What ``--track`` costs the training loop, and how soon a step reaches the tracker.

Overhead: the same ``fit`` (a small MLP on in-memory data, ``log_every=1``: one event per
step, the heaviest logging the engine does) with tracking off, then on, for each tracker and
each way of hosting the follower: a process of its own (what ``fit`` does) and, for
comparison, a thread in the training process. Each repetition times the steady state from
the run's own event log (its step events' times, from step ``WARMUP`` to the last), so the
set-up and the follower's start (``import mlflow``: seconds of CPU beside the loop) are
outside the window; the variants run interleaved (A B C ..., A B C ...) and we print the
median steps/s, and per variant the median of per-repetition ratios to "off" with a bootstrap
90% interval.

Lag: a run per tracker while this process watches the tracker's own storage every 20 ms (the
event files through TensorBoard's ``EventFileLoader``, MLflow's SQLite store with sqlite3) and
notes when each step appears; lag = that moment minus the step event's time. Printed: the
first point's delay (the follower's start), then the median, p95 and max lag of the steady
state.

    python benchmarks/tracking_overhead.py [--repeat 5] [--steps 6000] [--hidden 64]
"""

from __future__ import annotations

import argparse
import glob
import os
import random
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


class ThreadFollowing(NullMonitor):
    """The follower on a thread of the training process, started at the run's start event."""

    def __init__(self, track: str):
        self.track, self.thread = track, None

    def feed(self, events) -> None:
        for event in events:
            if event["kind"] == "start" and self.thread is None:
                follower = TrackerFollower(event["run_id"], parse_track(self.track))
                self.thread = FollowerThread(follower).start()

    def close(self) -> None:
        if self.thread is not None:
            self.thread.stop()


def train(steps: int, hidden: int, track: str, thread: bool) -> str:
    torch.manual_seed(0)
    x, y = torch.randn(4096, 32), torch.randint(0, 4, (4096,))
    model = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 4))
    optimizer = torch.optim.SGD(model.parameters(), 0.01)
    monitor = ThreadFollowing(track) if thread else None
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
    if monitor is not None:
        monitor.close()
    return result.run_id


def steady_rate(run_id: str) -> float:
    """Steps per second between step ``WARMUP`` and the last step, from the run's events."""
    steps = [e for e in read_events(RunFiles.of(run_id).events)[0] if e["kind"] == "step"]
    window = [e for e in steps if e["step"] >= WARMUP]
    return (window[-1]["step"] - window[0]["step"]) / (window[-1]["t"] - window[0]["t"])


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
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for repetition in range(args.repeat):
        order = list(variants)
        for name in order:
            track, thread = variants[name]
            rates[name].append(steady_rate(train(args.steps, args.hidden, track, thread)))
            wait_followers_done(home)
        print(f"  repetition {repetition + 1}/{args.repeat}: " + ", ".join(f"{n} {rates[n][-1]:.0f}/s" for n in order))
    print(f"\nsteady state, log_every=1 ({args.steps} steps, timed from step {WARMUP}), median of {args.repeat}:")
    for name in variants:
        line = f"  {name:22s} {statistics.median(rates[name]):7.0f} steps/s"
        if name != "off":
            ratios = [off / on for off, on in zip(rates["off"], rates[name], strict=True)]
            low, high = bootstrap(ratios)
            line += f"   time ratio to off {statistics.median(ratios):.3f} [90% CI {low:.3f}, {high:.3f}]"
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
        run_id = train(args.steps, args.hidden, places[kind], thread=False)
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
