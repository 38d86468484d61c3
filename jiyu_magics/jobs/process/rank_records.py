"""What each rank reports about itself: ``runs/<id>/ranks/<rank>.json``.

torchrun reaps its workers, so their exit codes are invisible to anyone else; the worker entry
point (``jobs.worker``) therefore writes its pid and the ``CUDA_VISIBLE_DEVICES`` it saw when it
starts and its exit code and one-line error when it ends. A rank killed by a signal never writes
its end: its record still says ``running`` while its pid is gone, which is how we tell it was
killed; which signal killed it only its parent, torchrun's agent, can say (``torchrun_report``).
A rank that ended because its job was asked to stop says so (``stopped``): it exits with status
0 but did not finish.

Each record names the host the rank ran on. A pid means something only on its own host: a rank
on another machine (a Slurm or Kubernetes node, seen from a login node or a notebook server) is
``running`` until it records its end or its torchrun agent reports the signal that killed it;
its pid is never looked up here, where it may be another process's."""

from __future__ import annotations

import json
import math
import os
import signal as signals
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict

from ...core.processes.info import process_alive
from ...core.runs.files import RunFiles
from ...core.runs.model import RankState


class RankRecordJson(TypedDict):
    """A rank's record as the REST API (``GET /jiyu/api/runs/{id}/ranks``) sends it: the record,
    its state derived when read, and the name of the signal that killed it."""

    rank: int
    local_rank: int
    pid: int
    restart: int
    started: float
    ended: float | None
    exit_code: int | None
    error: str | None
    cuda_visible_devices: str | None  # the GPUs this rank saw (its lease), None when unset
    stopped: bool  # it ended because its run was asked to stop (exit code 0, but it did not finish)
    signal: int | None  # what killed it, as torchrun reported it
    host: str | None  # the machine it ran on; None: a record from before hosts
    nnodes: int  # nodes its world spans
    state: RankState
    signal_name: str | None  # SIGKILL


@dataclass
class RankRecord:
    rank: int
    local_rank: int
    pid: int
    restart: int = 0
    started: float = 0.0
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    cuda_visible_devices: str | None = None  # the GPUs this rank saw (its lease), None when unset
    stopped: bool = False  # it ended because its job was asked to stop
    signal: int | None = None  # what killed it, as torchrun reported (never written by the rank)
    host: str | None = None  # the machine it ran on (its hostname); None: a record from before hosts
    nnodes: int = 1  # nodes its world spans: a failure names the host when there are several

    @property
    def here(self) -> bool:
        """Whether it ran on this machine, where its pid can be looked up."""
        return self.host is None or self.host == socket.gethostname()

    @property
    def state(self) -> RankState:
        """Derived when read: exited once it wrote its end, else running while its process
        lives, killed once it is gone (a rank on another host: once its node's torchrun
        reported the signal that killed it)."""
        if self.ended is not None:
            return RankState.EXITED
        if not self.here:  # only its own record or its agent's report can say it ended
            return RankState.KILLED if self.signal is not None else RankState.RUNNING
        return RankState.RUNNING if process_alive(self.pid, self.started) else RankState.KILLED

    @property
    def who(self) -> str:
        """``rank 1``, or ``rank 1 on n2`` when its world spans several nodes."""
        return f"rank {self.rank} on {self.host}" if self.nnodes > 1 and self.host else f"rank {self.rank}"

    @property
    def failed(self) -> bool:
        return self.state is RankState.KILLED or bool(self.exit_code)

    @property
    def exited_with_error(self) -> bool:
        """It ended with a non-zero status it recorded itself (an error, not a kill nor a stop)."""
        return self.ended is not None and bool(self.exit_code)

    @property
    def killed_by_signal(self) -> bool:
        """Killed by a signal other than SIGTERM: SIGTERM is what torchrun sends the ranks that
        are left once one failed, so a rank that died of it is a victim, not the cause."""
        return self.signal is not None and self.signal != signals.SIGTERM and self.state is RankState.KILLED

    def describe(self) -> str:
        if self.killed_by_signal and self.signal is not None:
            return f"{self.who}: killed by {signal_name(self.signal)}" + (
                " (out of memory?)" if self.signal == signals.SIGKILL else ""
            )
        if self.state is RankState.EXITED:
            return f"{self.who}: " + (self.error or f"exited with code {self.exit_code}")
        return f"{self.who}: {self.state}"

    def to_dict(self) -> RankRecordJson:
        """The record, its state and the name of the signal that killed it (``SIGKILL``)."""
        return RankRecordJson(
            rank=self.rank,
            local_rank=self.local_rank,
            pid=self.pid,
            restart=self.restart,
            started=self.started,
            ended=self.ended,
            exit_code=self.exit_code,
            error=self.error,
            cuda_visible_devices=self.cuda_visible_devices,
            stopped=self.stopped,
            signal=self.signal,
            host=self.host,
            nnodes=self.nnodes,
            state=self.state,
            signal_name=None if self.signal is None else signal_name(self.signal),
        )


def ranks_dir(run_id: str) -> Path:
    return RunFiles.of(run_id).root / "ranks"


def write(run_id: str, record: RankRecord) -> None:
    """Whole-file replace, so a reader never sees half a record."""
    folder = ranks_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{record.rank}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, folder / f"{record.rank}.json")


def read_all(run_id: str) -> list[RankRecord]:
    records = []
    for path in sorted(ranks_dir(run_id).glob("*.json")):
        try:
            records.append(RankRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(records, key=lambda r: r.rank)


def read_with_signals(run_id: str) -> list[RankRecord]:
    """The records with the signal that killed a rank, from torchrun's report in the run's log
    (every node's agent writes there); the log's tail is read only when a rank was killed or
    one on another host has not recorded its end, not on every poll of a local run's page."""
    records = read_all(run_id)
    if any(record.state is RankState.KILLED or (not record.here and record.ended is None) for record in records):
        from . import torchrun_report

        records = with_signals(records, torchrun_report.signals(RunFiles.of(run_id).log))
    return records


def with_signals(records: list[RankRecord], killed_by: dict[int, int]) -> list[RankRecord]:
    """The records with the signal that killed each rank, from torchrun's report (pid →
    signal number, ``torchrun_report.signals``)."""
    for record in records:
        record.signal = killed_by.get(record.pid, record.signal)
    return records


def first_failure(records: list[RankRecord]) -> RankRecord | None:
    """The rank that failed first. A rank killed by a signal (``kill -9``, the OOM killer) is
    the cause whenever there is one: the others fail because it vanished ("Connection closed by
    peer"), whatever their errors' times say. Else the earliest error that was recorded, else
    a rank that was killed by an unknown hand."""
    by_signal = sorted((r for r in records if r.killed_by_signal), key=lambda r: r.rank)
    killed = [r for r in records if r.state is RankState.KILLED]
    candidates = by_signal or errors_in_order(records) or killed
    return candidates[0] if candidates else None


def errors_in_order(records: Iterable[RankRecord]) -> list[RankRecord]:
    """The ranks that exited with an error they recorded, the earliest end first."""
    return sorted((r for r in records if r.exited_with_error), key=_end_time)


def _end_time(record: RankRecord) -> float:
    return math.inf if record.ended is None else record.ended  # never None once it exited


def signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"
