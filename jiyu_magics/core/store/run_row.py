"""One run as the store keeps it: the row of the ``runs`` table, private to the store and to the
processes that own runs. Clients (REST, the panel, ``--json``) get the smaller record of
``views.run_record`` instead, built from it.

A copy of the row lives in the run's folder (``run.json``), written when the run is created
and when it ends, so a lost or corrupt store can be rebuilt (``repair``).
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypedDict

from ..events.fold import RunSummary
from ..runs.files import private_folder, run_dir
from ..runs.model import RunKind, RunStatus

RECORD_FILE = "run.json"


class RunGpu(TypedDict):
    """A lease as a run carries it (``Run.gpus``, the REST record's ``gpus``)."""

    uuid: str
    index: int
    run_id: str
    since: float
    ended: float | None
    shared: bool


class UnknownRun(LookupError):
    """No run matches the id (or id prefix) the user gave."""


class ForeignRun(UnknownRun):
    """The run is another user's on this box: not in this user's store, and not theirs to see,
    stop or change (a 403 where an unknown run is a 404)."""

    def __init__(self, run_id: str, owner: str):
        super().__init__(f"run {run_id} is {owner}'s: only {owner} can see, change or stop it")
        self.owner = owner


@dataclass
class Run:
    id: str
    name: str
    kind: RunKind  # stored, sent and shown as its string value
    status: RunStatus
    nproc: int = 1
    nnodes: int = 1
    notebook: str | None = None
    cwd: str | None = None
    host: str = ""
    backend: str = "local"
    params: dict = field(default_factory=dict)
    # the run's recorded process: what ``jiyu stop`` spares and waits for (a job's supervisor;
    # torchrun for a kernel's ``%%train --nproc``, so that a stop never reaches the kernel)
    pid: int | None = None
    pid_started: float | None = None  # its start time: a recycled pid is not the run's
    pgid: int | None = None
    # the process that records the run's end (its lifecycle owner: the kernel, the supervisor);
    # the run is not lost while it lives, even once ``pid`` ended. Never signalled for a kernel
    owner_pid: int | None = None
    owner_started: float | None = None
    created: float = 0.0
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    stop_requested: bool = False
    stop_grace: float | None = None  # seconds between SIGTERM and SIGKILL the stop asked for
    scheduler_id: str | None = None  # the job's id where a scheduler holds it (Slurm job id, Kubernetes name)
    queue_reason: str | None = None  # why a queued run waits, in the words of whoever holds it
    polled: float | None = None  # when its scheduler was last asked about it (by the follower)
    gpus_requested: int | None = None  # GPUs the run waits for (0: a CPU job; None: it never queues)
    priority: int = 0  # higher starts first among waiting runs
    queue_rank: float | None = None  # the order among waiting runs of one priority (submission time)
    share: bool = False  # its GPUs may hold other sharing runs' leases too
    preemptible: bool = False  # on a box: another user's run that waited long may stop and requeue it
    # its progress summary (``events.log.summarize``), stored once when it ended: listings of
    # thousands of finished runs read no event log. None while it runs (views read the log)
    summary: RunSummary | None = None
    stalled_since: float | None = None  # while running: the time of the last step, which has not moved since
    #   for the run's stall timeout while its ranks live (``jobs.stall_watch``); a flag, not a status
    # not columns: filled in when read
    gpus: list[RunGpu] = field(default_factory=list)  # the GPUs it holds or held: index, uuid, since, ended
    queue_position: int | None = None  # 1-based, while queued
    derived: bool = False  # the status was worked out at read time (lost: its processes are gone), not stored
    # an ended run's processes still alive here ("1234 sleep": a helper its notebook started),
    # filled in by listings (``jobs.run_control.with_leftovers``); ``jiyu stop`` ends them
    leftovers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kind, self.status = RunKind(self.kind), RunStatus(self.status)

    @property
    def active(self) -> bool:
        return self.status.active

    @property
    def stalled(self) -> bool:
        """Running, but its step has not moved for its stall timeout: shown beside ``running``."""
        return self.status == RunStatus.RUNNING and self.stalled_since is not None

    @property
    def duration(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    def to_dict(self) -> dict:
        """The fields as they are (no deep copy), with the duration."""
        data = dict(vars(self))
        data["duration"] = self.duration
        return data

    @classmethod
    def from_row(cls, row: sqlite3.Row | dict) -> Run:
        """From a store row, or a run folder's record of one (whose unknown keys, from a newer
        jiyu, are ignored)."""
        data = dict(zip(row.keys(), row, strict=True)) if isinstance(row, sqlite3.Row) else dict(row)
        if not data.keys() <= COLUMNS:  # a row of a newer schema, or a record with more keys
            data = {k: v for k, v in data.items() if k in COLUMNS}
        params = data.get("params")
        data["params"] = json.loads(params) if params and params != "{}" else {}
        data["summary"] = json.loads(data["summary"]) if data.get("summary") else None
        data["stop_requested"] = bool(data.get("stop_requested"))
        data["share"] = bool(data.get("share"))
        data["preemptible"] = bool(data.get("preemptible"))
        return cls(**data)

    from_record = from_row

    def to_row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k not in DERIVED}
        row["params"] = json.dumps(row["params"])
        row["summary"] = None if row["summary"] is None else json.dumps(row["summary"])
        row["stop_requested"] = int(row["stop_requested"])
        row["share"] = int(row["share"])
        row["preemptible"] = int(row["preemptible"])
        return row


DERIVED = frozenset({"gpus", "queue_position", "derived", "leftovers"})
COLUMNS = {f.name for f in fields(Run)} - DERIVED


def save_record(run: Run) -> None:
    """The row, copied into the run's folder when it is created and at each change of status, so a lost or
    corrupt store can be rebuilt (``repair``). Best effort: the store is the authority."""
    folder = run_dir(run.id)
    try:
        private_folder(folder)
        temp = folder / f".{RECORD_FILE}.{os.getpid()}"
        temp.write_text(json.dumps(run.to_row()))
        os.replace(temp, folder / RECORD_FILE)
    except OSError:
        pass


def new_run_id() -> str:
    """Eight hex digits: short enough to type in ``%job logs``, and any unique prefix works."""
    return secrets.token_hex(4)
