"""Ranks on Slurm, for the run lifecycle: the placement submits the batch script with
``sbatch``; its handle follows the job by its id and stops it with ``scancel``.

Nothing waits on a Slurm job: the handle is made again from the run row (``attach``) whenever
someone asks how the run is doing, and asks Slurm once (its answer is kept a second, so one
look at the run costs one ``scontrol`` call).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ....core.runs.files import RunFiles
from ....core.runs.model import RunStatus
from ....core.store.run_row import Run
from ....core.store.run_store import RunStore
from ...gpu_queue import Grant
from ...launch_spec import LaunchSpec
from ...process import failure_line, rank_records, torchrun_report
from ...process import process_tree as processes
from ...process.process_tree import StopResult
from ...rank_placement import SchedulerGrantsAtOnce, SchedulerState
from ..handover import Handover
from . import commands as slurm
from . import states
from .options import SlurmOptions
from .script import JOB_ID_FILE, SCRIPT_NAME, render

STATE_CACHE_S = 1.0
LEAVE_QUEUE_S = 120.0  # a cancelled job's clean-up: the site's KillWait (30 s by default) and the epilog
QUEUE_CHECK_S = 0.5


@dataclass
class SlurmPlacement(SchedulerGrantsAtOnce):
    backend: str = "slurm"
    scheduled: Literal[True] = True

    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        grant: Grant | None = None,
    ) -> SlurmJob:
        """Writes the batch script into the run folder and submits it. Where Slurm is missing
        or unconfigured the run waits for the script to be submitted on the cluster (it says
        how); a refusal by ``sbatch`` raises ``JobError`` in Slurm's words."""
        files = RunFiles.of(run_id)
        path = files.root / SCRIPT_NAME
        options = SlurmOptions.from_dict(spec.slurm)
        path.write_text(render(RunStore().get(run_id), spec, files, options, script=Path(script)))
        path.chmod(0o755)
        try:
            job_id = slurm.sbatch(path, env)
        except slurm.SlurmUnavailable as why:
            Handover(self.backend, str(path), False, manual_instructions(path, str(why))).save(files)
            return SlurmJob(run_id, None)
        Handover(self.backend, str(path), True, f"submitted as Slurm job {job_id} (batch script {path})").save(files)
        return SlurmJob(run_id, job_id)

    def attach(self, run: Run) -> SlurmJob:
        return SlurmJob(run.id, run.scheduler_id)


def manual_instructions(path: Path, why: str) -> str:
    return (
        f"{why}; submit it on the cluster's login node with `sbatch {path}` (the run folder must be on a path "
        "the cluster shares): jiyu follows the job from its first line"
    )


class SlurmJob:
    pid = None  # no process of ours stands for the ranks: Slurm does
    pgid = None

    def __init__(self, run_id: str, job_id: str | None):
        self.run_id, self.scheduler_id = run_id, job_id
        self.files = RunFiles.of(run_id)
        self._state: SchedulerState | None = None
        self.info: slurm.SlurmJobInfo | None = None  # what Slurm said when last asked (its nodes, once it runs)
        self._asked = -float("inf")
        self._withdrawn = False  # stopped before anyone submitted it

    def state(self) -> SchedulerState:
        if self._state is not None and time.monotonic() - self._asked < STATE_CACHE_S:
            return self._state
        self.scheduler_id = self.scheduler_id or self._id_the_job_wrote()
        if self.scheduler_id is None and self._withdrawn:
            state = SchedulerState(RunStatus.STOPPED)
        elif self.scheduler_id is None:
            state = SchedulerState(
                RunStatus.QUEUED, reason=f"not submitted: run `sbatch {self.files.root / SCRIPT_NAME}` on the cluster"
            )
        else:
            info = self.info = slurm.job_info(self.scheduler_id)
            state = states.state_of(info, self._failed_nodes(info)) if info else states.lost(self.scheduler_id)
        self._state, self._asked = state, time.monotonic()
        return state

    def poll(self) -> int | None:
        state = self.state()
        return state.exit_code if state.over else None

    def wait(self, timeout: float | None = LEAVE_QUEUE_S) -> int | None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while not self.state().over and time.monotonic() < deadline:
            time.sleep(STATE_CACHE_S)
        return self.poll()

    def stop(self, grace: float = 10.0) -> StopResult:
        """SIGTERM to the job's steps first (torchrun passes it to the ranks, which checkpoint
        and exit), ``scancel`` if it is still there after ``grace`` (Slurm's own SIGTERM, then
        SIGKILL after its KillWait), and a check that it left the queue. Processes of the run
        left on this machine (a one-node cluster) are stopped too."""
        began = time.monotonic()
        self._state = None
        if self.state().over:
            return StopResult(0)
        if self.scheduler_id is None:
            self._withdrawn, self._state = True, None
            return StopResult(0)
        if self.state().status is RunStatus.RUNNING:
            slurm.scancel(self.scheduler_id, signal="TERM")
            _until(lambda: not slurm.in_queue(self.scheduler_id), grace)
        if slurm.in_queue(self.scheduler_id):
            slurm.scancel(self.scheduler_id)
            _until(lambda: not slurm.in_queue(self.scheduler_id), LEAVE_QUEUE_S)
        local = processes.stop(processes.tagged(self.run_id), grace=min(grace, 5.0))
        queued = [int(self.scheduler_id)] if slurm.in_queue(self.scheduler_id) else []
        self._state = None
        return StopResult(1 + local.found, local.killed, queued + local.remaining, time.monotonic() - began)

    def ranks(self) -> list[rank_records.RankRecord]:
        return rank_records.read_all(self.run_id)

    def error_line(self) -> str | None:
        """Slurm's own line where it knows the cause better than any rank (a node failed, out
        of memory, the time limit: the ranks only saw themselves killed); else the rank that
        failed first, as for a local run, named with its node (one killed by a signal, as its
        node's torchrun reported it, before the errors of the ranks it left behind); else why
        the nodes never trained together (``node_records``); else the exit code."""
        state = self.state()
        if not state.over or state.exit_code == 0:
            return None
        if state.error:
            return state.error
        return failure_line.ranks_or_nodes(self.run_id, self.files.log) or (
            f"Slurm job {self.scheduler_id} ended with exit code {state.exit_code}"
        )

    def _failed_nodes(self, info: slurm.SlurmJobInfo) -> list[str]:
        """The nodes a NODE_FAIL ended the job for: as srun said in the job's log (the time
        it happened), else those Slurm has down now."""
        if info.state != "NODE_FAIL":
            return []
        said = re.findall(r"srun: error: Node failure on (\S+)", torchrun_report.tail(self.files.log))
        if said:
            return list(dict.fromkeys(said))
        return slurm.unhealthy_nodes(info.nodes) if info.nodes else []

    def _id_the_job_wrote(self) -> str | None:
        """A batch script submitted by hand writes its job id into the run folder."""
        try:
            return (self.files.root / JOB_ID_FILE).read_text().strip() or None
        except OSError:
            return None


def _until(done, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(QUEUE_CHECK_S)
    return True
