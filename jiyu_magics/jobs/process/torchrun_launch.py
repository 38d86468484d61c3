"""``torchrun`` as a child process group: the building block of ``%%train --nproc`` and of
the job supervisor.

    launch = Launch.start("job.py", nproc=2, run_id=run.id)
    launch.ranks()        # per-rank pid / state / exit code
    launch.wait()         # torchrun's exit code
    launch.error_line()   # "rank 1: ValueError: ..." for the first rank that failed
    launch.stop()         # every process of it, SIGTERM then SIGKILL, verified
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from ...core.runs.files import RunFiles
from . import parent_death, torchrun_report
from . import process_tree as processes
from . import rank_records as ranks
from . import torchrun_command as torchrun
from .rank_records import RankRecord


class Launch:
    def __init__(self, proc: subprocess.Popen, run_id: str, nproc: int):
        self.proc, self.run_id, self.nproc = proc, run_id, nproc
        self.files = RunFiles.of(run_id)
        self.stop_result: processes.StopResult | None = None

    @classmethod
    def start(
        cls,
        script: str | os.PathLike,
        *,
        nproc: int,
        run_id: str,
        args: Sequence[str] = (),
        cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[bytes] | None = None,
        nnodes: int = 1,
        rdzv_endpoint: str | None = None,
        node_rank: int | None = None,
        max_restarts: int = 0,
        die_with_parent: bool | None = None,
    ) -> Launch:
        """Starts torchrun in a new session (its own process group), its output appended to
        ``log`` (default: the run's ``stdout.log``); ``env`` adds variables to the caller's
        environment. ``die_with_parent`` asks Linux to SIGKILL torchrun when the caller dies
        (a ``kill -9`` of the kernel or the supervisor), and the ranks, told by their own
        parent-death SIGTERM, stop at a step with a checkpoint (``parent_death``). The
        request follows the thread that starts torchrun, so by default it is made from a
        main thread only (the kernel's cells and the supervisor run there)."""
        files = RunFiles.of(run_id).create()
        cmd = torchrun.command(
            Path(script).resolve(),
            nproc,
            nnodes=nnodes,
            rdzv_endpoint=rdzv_endpoint,
            node_rank=node_rank,
            max_restarts=max_restarts,
            log_dir=files.root / "torchrun",
            args=args,
        )
        return cls.start_command(
            cmd, nproc=nproc, run_id=run_id, cwd=cwd, env=env, log=log, die_with_parent=die_with_parent
        )

    @classmethod
    def start_command(
        cls,
        cmd: Sequence[str],
        *,
        nproc: int,
        run_id: str,
        cwd: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[bytes] | None = None,
        die_with_parent: bool | None = None,
    ) -> Launch:
        """Another launcher of ranks as the run's child process group, started as torchrun is
        (a ranks pool's supervisor): the same environment, log, session and parent-death rule."""
        if die_with_parent is None:
            die_with_parent = threading.current_thread() is threading.main_thread()
        files = RunFiles.of(run_id).create()
        own_log = log is None
        output = open(files.log, "ab") if log is None else log
        try:
            proc = subprocess.Popen(
                list(cmd),
                cwd=cwd,
                env=torchrun.environment(run_id, files.error, env),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death.request_kill if die_with_parent else None,
            )
        finally:
            if own_log:
                output.close()
        return cls(proc, run_id, nproc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def pgid(self) -> int:
        return self.proc.pid  # a new session's leader leads its own process group

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def ranks(self) -> list[RankRecord]:
        """Each rank's latest record (pid, restart, state running|exited|killed, exit code),
        with the signal that killed it where torchrun reported one."""
        return ranks.with_signals(ranks.read_all(self.run_id), torchrun_report.signals(self.files.log))

    def first_failure(self) -> RankRecord | None:
        return ranks.first_failure(self.ranks())

    def error_line(self) -> str | None:
        """One line for the user: the first failing rank's error; else torchrun's own root
        cause; else torchrun's exit code. None while running or after success."""
        if self.poll() in (None, 0) and not self.stop_result:
            return None
        failure = self.first_failure()
        if failure is not None:
            return failure.describe()
        if self.returncode is not None and self.returncode < 0:
            return f"torchrun killed by {ranks.signal_name(-self.returncode)}; its ranks were stopped with it"
        elastic = read_elastic_error(self.files.error)
        return elastic or f"torchrun exited with code {self.returncode}"

    def stop(self, grace: float = 10.0) -> processes.StopResult:
        """Every process of the launch, including workers torchrun no longer tracks."""
        self.stop_result = processes.stop_run(self.run_id, self.pid, grace)
        try:
            self.proc.wait(processes.KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.stop_result


def read_elastic_error(path: Path) -> str | None:
    """The message of a torch elastic error file (torch's ``@record`` format), first line."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message")
    if isinstance(message, dict):
        message = message.get("message")
    text = " ".join(str(message or "").split())
    return text or None
