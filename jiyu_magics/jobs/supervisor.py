"""The detached supervisor of one job: ``python -m jiyu_magics.jobs.supervisor RUN_ID``.

``submit`` starts it in a new session, so it outlives the kernel, the browser and the Jupyter
server. It runs torchrun as its child process group, keeps the run row true (running with pids,
then succeeded | failed | stopped with the exit code and the first failing rank's error), adds
the end to the event log, and runs the ``--notify`` command. If it is killed, the kernel tells
torchrun to stop (parent-death signal) and the next listing marks the run ``lost``.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

from ..core.event_log import EventLog
from ..core.run_files import RunFiles
from ..core.run_store import RunStore
from .process.torchrun_launch import Launch
from .launch_spec import LaunchSpec

POLL_S = 0.5
STORE_CHECK_S = 2.0  # how often the run row is read for a stop request that came without a signal
NOTIFY_TIMEOUT_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0


class Supervisor:
    def __init__(self, run_id: str):
        self.run_id = run_id
        self.store = RunStore()
        self.files = RunFiles.of(run_id)
        self.spec = LaunchSpec.load(self.files)
        self.stop_wanted = False
        self.stop_grace = DEFAULT_STOP_GRACE_S  # unless the stop request names one

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if self.store.get(self.run_id).stop_requested:
            return self._end("stopped", None, "stopped before it started")
        launch = self._start()
        code = self._wait(launch)
        if code == 0:
            return self._end("succeeded", code, None)
        if self.store.get(self.run_id).stop_requested:
            return self._end("stopped", code, "stopped by request")
        return self._end("failed", code, launch.error_line())

    def _start(self) -> Launch:
        spec = self.spec
        launch = Launch.start(self.files.script, nproc=spec.nproc, run_id=self.run_id,
                              cwd=self.store.get(self.run_id).cwd, nnodes=spec.nnodes,
                              rdzv_endpoint=spec.rdzv_endpoint, node_rank=spec.node_rank,
                              max_restarts=spec.max_restarts, die_with_parent=True)
        self.store.mark_running(self.run_id, pid=os.getpid(), pgid=launch.pgid)
        self.say(f"torchrun started: {spec.nproc} process(es) per node, pid {launch.pid}")
        return launch

    def _wait(self, launch: Launch) -> int:
        """torchrun's exit code; a signal to us, or a stop request in the run row (from a
        host where our pid means nothing), stops it first."""
        last_check = time.monotonic()
        while launch.poll() is None:
            if time.monotonic() - last_check >= STORE_CHECK_S:
                last_check = time.monotonic()
                run = self.store.get(self.run_id)
                self.stop_wanted |= run.stop_requested
                self.stop_grace = run.stop_grace if run.stop_grace is not None else self.stop_grace
            if self.stop_wanted:
                self.store.request_stop(self.run_id, self.stop_grace)
                launch.stop(self.stop_grace)  # the grace the stop asked for, not ours
                break
            time.sleep(POLL_S)
        return launch.wait()

    def _end(self, status: str, code: int | None, error: str | None) -> int:
        """The end goes into the event log before the row says the run ended, so whoever sees
        the final status also finds the whole log."""
        with EventLog(self.files.events) as events:
            if error and status == "failed":
                events.append("error", message=error)
            events.append("end", status=status, exit_code=code, source="supervisor")
        run = self.store.finish(self.run_id, status, code, error)
        took = f" after {run.duration:.0f} s" if run.duration is not None else ""
        self.say(f"job {run.status}{took}" + (f" (exit code {code})" if code else "")
                 + (f": {run.error}" if run.error else ""))
        self._notify(run.status)
        return 0

    def _notify(self, status: str) -> None:
        if not self.spec.notify:
            return
        cmd = [*shlex.split(self.spec.notify), self.run_id, status]
        env = {**os.environ, "JIYU_RUN_STATUS": status}
        try:
            done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=sys.stdout, stderr=sys.stdout,
                                  timeout=NOTIFY_TIMEOUT_S)
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
    supervisor = Supervisor(argv[0])
    try:
        return supervisor.run()
    except BaseException as error:  # noqa: BLE001 - the run must not stay "running" on our bug
        supervisor.store.finish(supervisor.run_id, "failed", None, f"supervisor error: {error!r}")
        raise


if __name__ == "__main__":
    sys.exit(main())
