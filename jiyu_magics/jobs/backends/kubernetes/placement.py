"""Ranks on Kubernetes, for the run lifecycle: the placement applies the run's manifest with
``kubectl``; its handle follows the job (``kubectl get -o json``) and stops it (``kubectl
delete``: the pods get SIGTERM, torchrun passes it to the ranks, which checkpoint).

Where kubectl is missing or has no cluster, the manifest is written and printed with the
command to apply it; the handle then keeps looking for the job by its name (``jiyu-<run id>``),
so a manifest applied by hand is followed too once this machine can reach that cluster.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import yaml

from ....core.runs.files import RunFiles
from ....core.runs.model import RunStatus
from ....core.store.run_row import Run
from ....core.store.run_store import RunStore
from ...gpu_queue import Grant
from ...launch_spec import LaunchSpec
from ...process import failure_line, rank_records
from ...process.process_tree import StopResult
from ...rank_placement import SchedulerGrantsAtOnce, SchedulerState
from ..handover import Handover
from . import kubectl, states
from .manifests import MANIFEST_NAME, job_name, render

STATE_CACHE_S = 1.0
GONE_WAIT_S = 120.0  # the pods' termination grace (30 s by default) and the controller's clean-up


@dataclass
class KubernetesPlacement(SchedulerGrantsAtOnce):
    backend: str = "kubernetes"
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
    ) -> KubernetesJob:
        files = RunFiles.of(run_id)
        path = files.root / MANIFEST_NAME
        path.write_text(render(RunStore().get(run_id), spec, files))
        kind = _kind_in(path)
        try:
            answer = kubectl.apply(path)
        except kubectl.KubectlUnavailable as why:
            Handover(self.backend, str(path), False, manual_instructions(path, str(why))).save(files)
            return KubernetesJob(run_id, kind, submitted=False)
        Handover(self.backend, str(path), True, f"applied as {kind} {job_name(run_id)} ({answer})").save(files)
        return KubernetesJob(run_id, kind, submitted=True)

    def attach(self, run: Run) -> KubernetesJob:
        path = RunFiles.of(run.id).root / MANIFEST_NAME
        return KubernetesJob(run.id, _kind_in(path), submitted=run.scheduler_id is not None)


def manual_instructions(path, why: str) -> str:
    return f"{why}; apply this manifest on the cluster with `kubectl apply -f {path}`:\n\n{path.read_text()}"


def _kind_in(path) -> str:
    documents = list(yaml.safe_load_all(path.read_text()))
    return str(documents[-1]["kind"])


class KubernetesJob:
    pid = None
    pgid = None

    def __init__(self, run_id: str, kind: str, submitted: bool):
        self.run_id, self.kind = run_id, kind
        self.files = RunFiles.of(run_id)
        self.scheduler_id = f"{kind.lower()}/{job_name(run_id)}" if submitted else None
        self._state: SchedulerState | None = None
        self._asked = -float("inf")
        self._withdrawn = False

    def state(self) -> SchedulerState:
        if self._state is not None and time.monotonic() - self._asked < STATE_CACHE_S:
            return self._state
        if self._withdrawn:
            state = SchedulerState(RunStatus.STOPPED)
        else:
            state = self._ask()
        self._state, self._asked = state, time.monotonic()
        return state

    def _ask(self) -> SchedulerState:
        try:
            job = kubectl.get(self.kind, job_name(self.run_id))
        except kubectl.KubectlUnavailable:
            if self.scheduler_id is None:  # never applied, and no cluster here to find it on
                return SchedulerState(
                    RunStatus.QUEUED,
                    reason=f"not applied: run `kubectl apply -f {self.files.root / MANIFEST_NAME}` on the cluster",
                )
            raise
        if job is None and self.scheduler_id is None:
            return SchedulerState(RunStatus.QUEUED, reason="not applied yet")
        self.scheduler_id = f"{self.kind.lower()}/{job_name(self.run_id)}"
        return states.state_of(self.kind, job)

    def poll(self) -> int | None:
        state = self.state()
        return state.exit_code if state.over else None

    def wait(self, timeout: float | None = GONE_WAIT_S) -> int | None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while not self.state().over and time.monotonic() < deadline:
            time.sleep(STATE_CACHE_S)
        return self.poll()

    def stop(self, grace: float = 10.0) -> StopResult:
        """``kubectl delete`` of the job and its script (the pods get SIGTERM, then SIGKILL after
        their termination grace), and a check that the job is gone."""
        began = time.monotonic()
        if self.scheduler_id is None:
            self._withdrawn, self._state = True, None
            return StopResult(0)
        kubectl.delete(self.files.root / MANIFEST_NAME)
        deadline = time.monotonic() + GONE_WAIT_S
        while kubectl.get(self.kind, job_name(self.run_id)) is not None and time.monotonic() < deadline:
            time.sleep(1.0)
        gone = kubectl.get(self.kind, job_name(self.run_id)) is None
        self._state = None
        return StopResult(1, remaining=[] if gone else [0], seconds=time.monotonic() - began)

    def ranks(self) -> list[rank_records.RankRecord]:
        return rank_records.read_all(self.run_id)

    def error_line(self) -> str | None:
        state = self.state()
        if not state.over or state.exit_code == 0:
            return None
        return failure_line.ranks_or_nodes(self.run_id) or state.error
