"""The follower as a process of its own: ``python -m jiyu_magics.trackers follow RUN_ID``.

Why a process and not a thread where training runs in the same process (an in-kernel
``%%train``, a script's ``fit``): TensorBoard's writer checksums each record in pure Python
(about 0.1 ms a record here) and MLflow's SQLite store goes through SQLAlchemy; on a thread
that work would hold the training loop's GIL (measured in ``benchmarks/tracking_overhead.py``).
In a process of its own it costs the loop nothing, and ``import mlflow`` (seconds, hundreds
of MB) never enters the kernel.

It ends when told: its standard input closes (``--stdin``: the owner closed the pipe when
``fit`` ended, or the owner died), it gets SIGTERM (a Slurm job script after its step), or
(``--until-ended``) the run store says the run ended. Then it reads the rest of the log and
ends each tracker run with the run's status: the log's last ``end``; a call that never ended
takes the store's final status when there is one, else stays running in the tracker (a
requeued Slurm attempt goes on there, and its owner's end finishes it).
"""

from __future__ import annotations

import argparse
import contextvars
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable

from ..core.runs.files import RunFiles
from ..core.runs.model import RunStatus
from ..core.store.database import StoreUnusable
from ..core.store.run_store import RunStore, UnknownRun
from .destinations import Destination, TrackSpecError, as_strings, parse_track
from .follower import POLL_S, TrackerFollower

STORE_CHECK_S = 2.0
TRACKERS_LOG = "trackers.log"  # what a follower says once its owner stopped listening
OWNER_WAIT_S = 15.0  # how long a kernel's run waits at its end for its follower (``done``)


class FollowerProcess:
    """The owner's handle on a follower process. What the follower says (a tracker it cannot
    write, one reachable again) is said where its owner is (``_Relay``). ``done()`` closes its
    pipe; with ``wait_s`` (a kernel's run: its cell) it waits that long for the follower to
    finish, so that what it says about the run's end shows in the run's own cell, not in
    whichever cell runs next; a follower that takes longer finishes in the background and says
    the rest into the run's ``trackers.log``."""

    def __init__(self, proc: subprocess.Popen, relay: _Relay):
        self.proc, self.relay = proc, relay

    @classmethod
    def start(cls, run_id: str, destinations: Iterable[Destination]) -> FollowerProcess:
        cmd = [sys.executable, "-m", "jiyu_magics.trackers", "follow", run_id, "--stdin"]
        for destination in as_strings(destinations):
            cmd += ["--track", destination]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a kernel interrupt (SIGINT to the kernel's group) is not its
            close_fds=True,
        )
        return cls(proc, _Relay(proc, run_id))

    def done(self, wait_s: float = 0.0) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if wait_s and not self.relay.finished(wait_s):
            self.relay.to_log()
            print(
                f"jiyu: run {self.relay.run_id}'s trackers are still being written; their follower goes on in "
                f"the background and says what comes of it in {self.relay.log}",
                file=sys.stderr,
                flush=True,
            )

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class _Relay:
    """The follower's standard error, line by line, on its owner's: on a thread that runs in the
    owner's context as it was when the follower started (in IPython's kernel, that context names
    the cell that started the run, so a line lands there even while the thread outlives it),
    until ``to_log``; from then on into the run's ``trackers.log``. It reaps the follower once
    its stderr closes: a kernel that trains all day leaves no zombie per run."""

    def __init__(self, proc: subprocess.Popen, run_id: str):
        self.proc, self.run_id = proc, run_id
        self.log = RunFiles.of(run_id).root / TRACKERS_LOG
        self._to_owner = True
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._relay,), name=f"jiyu-track-{run_id}", daemon=True
        )
        self._thread.start()

    def finished(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def to_log(self) -> None:
        self._to_owner = False

    def _relay(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", errors="replace")
            try:
                if self._to_owner:
                    sys.stderr.write(line)
                    sys.stderr.flush()
                else:
                    with open(self.log, "a", encoding="utf-8") as log:
                        log.write(line)
            except (OSError, ValueError):
                continue  # the owner's stream is gone (a closed kernel), the folder too: nothing to say it to
        self.proc.stderr.close()
        self.proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jiyu_magics.trackers follow")
    parser.add_argument("run_id")
    parser.add_argument("--track", action="append", default=[], help="tensorboard[:DIR] or mlflow[:URI]; repeatable")
    parser.add_argument("--stdin", action="store_true", help="end when standard input closes (the owner's pipe)")
    parser.add_argument("--until-ended", action="store_true", help="end once the run store says the run ended")
    args = parser.parse_args(argv)
    try:
        destinations = parse_track(args.track)
    except TrackSpecError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    follower = TrackerFollower(args.run_id, destinations)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner's interrupt is not ours: its end is
    checked = -float("inf")
    while not stopping:
        follower.poll()
        if args.stdin and _closed_within(POLL_S):
            break
        if not args.stdin:
            time.sleep(POLL_S)
        if args.until_ended and time.monotonic() - checked >= STORE_CHECK_S:
            checked = time.monotonic()
            if _ended(args.run_id) is not None:
                break
    follower.close(_final_word(follower, args.run_id))
    return 0


def _closed_within(seconds: float) -> bool:
    """Waits up to ``seconds`` on standard input; True when it closed (EOF)."""
    ready, _, _ = select.select([sys.stdin.fileno()], [], [], seconds)
    if not ready:
        return False
    return not os.read(sys.stdin.fileno(), 4096)


def _final_word(follower: TrackerFollower, run_id: str) -> RunStatus | None:
    """None: the log's own last status decides; the store's final status where the log's last
    call never ended (its process was killed)."""
    if any(s.status not in (None, RunStatus.RUNNING) for s in follower.syncing):
        return None
    return _ended(run_id)


def _ended(run_id: str) -> RunStatus | None:
    try:
        status = RunStore().get(run_id).status
    except (UnknownRun, StoreUnusable):
        return None
    return status if status.final else None
