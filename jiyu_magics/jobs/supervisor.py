"""The detached supervisor of one job: ``python -m jiyu_magics.jobs.supervisor RUN_ID``.

``submit`` starts it in a new session, so it outlives the kernel, the browser and the Jupyter
server. It waits in the queue while its GPUs are taken (the run store is the arbiter, see
``gpu_queue``), then owns the run's lifecycle (``jobs.lifecycle``: torchrun as its child process group,
the stop procedure, the final status rule and its record), stops the run on SIGTERM/SIGINT,
writes the job's log lines and runs the ``--notify`` command. If it is killed, the kernel tells
torchrun to stop (parent-death signal); listings show the run ``lost`` at once and the next run
owner's upkeep (``jobs.upkeep``) records it. A store that is deleted, replaced or busy under it
ends nothing: the run goes on and is registered again once the store is back
(``store_outage``).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

from ..core.environment import child_environment
from ..core.gpu.status import owned_snapshot
from ..core.gpu.usage import accrue
from ..core.runs.launch_context import RESUME_ENV
from ..core.runs.model import RunStatus
from ..core.store.database import StoreUnusable
from ..core.store.run_row import UnknownRun
from ..core.store.run_store import RunStore
from .final_status import Outcome
from .lifecycle import RunLifecycle, record_end_without_owner
from .rank_placement import LocalProcessGroup
from .run_upkeep import upkeep

NOTIFY_TIMEOUT_S = 60.0
USAGE_SAMPLE_S = 5.0  # how often the supervisor samples its GPUs' utilisation for idle GPU time


class Supervisor:
    """The run's lifecycle in a process of its own, plus what only a detached job has: its
    signals (a stop), its log lines and the ``--notify`` command."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.stop_wanted = False
        self.lifecycle = RunLifecycle.adopt(
            run_id,
            placement=LocalProcessGroup(die_with_parent=True),
            owner="supervisor",
            recorded_pid=os.getpid(),
            announce=self._announce,
            note=self.say,
        )
        self.spec = self.lifecycle.spec
        self._sampled = -float("inf")

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            upkeep(self.lifecycle.store)
        except StoreUnusable:
            pass  # housekeeping for others' runs; this one goes on (``store_outage``)
        with self.lifecycle as lifecycle:
            env: dict[str, str] = {}
            while True:
                self._start_and_wait(env)
                if not lifecycle.requeue():  # preempted on a box: wait again, then resume
                    break
                self.say("preempted for another user's run: checkpoint saved, back in the queue")
                env = {RESUME_ENV: "last"}
            outcome = lifecycle.end()
        self._notify(outcome.status.value)
        return 0

    def _start_and_wait(self, env: dict[str, str]) -> None:
        lifecycle = self.lifecycle
        started = lifecycle.start(env=env, stop_wanted=lambda: self.stop_wanted, on_wait=self.say)
        grant, handle = lifecycle.grant, lifecycle.handle  # both set by a start that started the ranks
        if started and grant is not None and handle is not None:
            resumed = " (resuming from its checkpoints)" if env else ""
            self.say(
                f"torchrun started: {self.spec.nproc} process(es) per node on {grant.describe()}, "
                f"pid {handle.pid}{resumed}"
            )
        lifecycle.wait(stop_wanted=lambda: self.stop_wanted, tick=self._sample_usage)

    def _sample_usage(self) -> None:
        """Idle GPU time of this job's GPUs, sampled here (NVML, every few seconds) rather than
        in the ranks: training does no extra work for it."""
        grant = self.lifecycle.grant
        if grant is None or not grant.leases or time.monotonic() - self._sampled < USAGE_SAMPLE_S:
            return
        self._sampled = time.monotonic()
        try:
            accrue(
                self.lifecycle.store.db,
                owned_snapshot(self.lifecycle.store, own_pids=[os.getpid()]),
                only=[lease.uuid for lease in grant.leases],
            )
        except StoreUnusable:
            pass

    def _announce(self, outcome: Outcome) -> None:
        """The job's last log line, written before the run row says it ended: ``jiyu logs -f``
        stops following at that moment and must find the line. A stopped job's line is where
        it stopped, its checkpoint and how to resume (no exit code: the stop's own doing)."""
        if outcome.status is RunStatus.STOPPED:
            self.say(f"job {outcome.error}")
            return
        known = self.lifecycle.outage.known
        try:
            started = RunStore().get(self.run_id).started
        except (StoreUnusable, UnknownRun):  # the store is out: what the owner knows of the run
            started = known.started if known is not None else None
        took = f" after {time.time() - started:.0f} s" if started is not None else ""
        code = outcome.exit_code
        self.say(
            f"job {outcome.status}{took}"
            + (f" (exit code {code})" if code else "")
            + (f": {outcome.error}" if outcome.error else "")
        )

    def _notify(self, status: str) -> None:
        if not self.spec.notify:
            return
        cmd = [*shlex.split(self.spec.notify), self.run_id, status]
        env = child_environment({"JIYU_RUN_STATUS": status})
        try:
            done = subprocess.run(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stdout, stderr=sys.stdout, timeout=NOTIFY_TIMEOUT_S
            )
            if done.returncode:
                self.say(f"--notify command exited with code {done.returncode}")
        except (OSError, subprocess.TimeoutExpired) as error:
            self.say(f"--notify command failed: {error}")

    def _on_signal(self, signum, frame) -> None:
        self.stop_wanted = True

    @staticmethod
    def say(text: str) -> None:
        print(f"[jiyu] {time.strftime('%H:%M:%S')} {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m jiyu_magics.jobs.supervisor RUN_ID", file=sys.stderr)
        return 2
    try:
        return Supervisor(argv[0]).run()
    except BaseException as error:  # noqa: BLE001 - the run must not stay active on our bug
        _record_own_failure(argv[0], error)
        raise


def _record_own_failure(run_id: str, error: BaseException) -> None:
    """The lifecycle records its own failures; this covers one that never came to be (no
    launch spec in the run folder)."""
    store = RunStore()
    try:
        if not store.get(run_id).active:
            return
    except UnknownRun:
        return
    record_end_without_owner(store, run_id, f"supervisor error: {error!r}")


if __name__ == "__main__":
    sys.exit(main())
