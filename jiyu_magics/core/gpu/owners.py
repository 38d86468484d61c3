"""Who holds each GPU: the runs that lease it, and each of its processes mapped to an owner.

A process NVML lists belongs to a jiyu run (it is the process the run store recorded, or it
carries the run's id in its environment: supervisors, torchrun, ranks and their workers), to a
Jupyter kernel (itself or an ancestor is one; the server knows kernels through its kernel and
session managers, elsewhere they are recognised by their command line), or to someone else.
Inside a container NVML reports host pids that match nothing here: those are "pid outside this
container", never guessed at; a leased run's own report of its memory (torch's, from its event
log) stands beside them.

A GPU is *free* when nothing leases it and the processes its leases do not account for hold no
more than the busy threshold (``JIYU_GPU_BUSY_MIB``, default 1 GiB): foreign use is common on
shared boxes and must not be trampled.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..box.identity import span, user_name
from ..processes.info import ancestors as process_ancestors
from ..processes.info import command_line, environ_value, process_uid
from ..runs.files import RUN_ID_ENV
from ..runs.model import RunStatus
from ..settings import GPU_BUSY_ENV as BUSY_ENV
from ..settings import Settings
from ..store.leases import GpuSlot, Lease
from .snapshot import GpuDevice, GpuLease, GpuProcess, GpuSnapshot, OwnerKind, ProcessOwnerJson

DEFAULT_BUSY_MIB = 1024
OUTSIDE = "pid outside this container"
KERNEL_FILE = re.compile(r"kernel-([0-9a-fA-F-]{8,})\.json\b")
ANCESTORS = 6  # how far up a GPU process's parents a kernel is looked for (a DataLoader worker's kernel)


def busy_threshold(env: Mapping[str, str] | None = None) -> int:
    """Bytes of foreign GPU memory above which a GPU is busy; a bad value is refused where it
    is set (``check_busy_mib``), here it falls back to the default."""
    raw = Settings.from_environ(env).gpu_busy_mib or ""
    try:
        return check_busy_mib(raw) * 2**20 if raw.strip() else DEFAULT_BUSY_MIB * 2**20
    except ValueError:
        return DEFAULT_BUSY_MIB * 2**20


def check_busy_mib(raw: str | float) -> int:
    value = float(raw)
    if not value >= 0:
        raise ValueError(f"{BUSY_ENV}={raw!r}: expected MiB >= 0")
    return int(value)


@dataclass
class KernelInfo:
    """A Jupyter kernel as the server (or the process table) knows it."""

    kernel_id: str
    pid: int
    notebook: str | None = None
    session_id: str | None = None
    execution_state: str | None = None  # idle | busy | starting ...
    idle_s: float | None = None  # seconds since its last activity


@dataclass
class ProcessOwner:
    kind: OwnerKind  # run | kernel | other | outside | user
    label: str  # one line for people
    run_id: str | None = None
    run_name: str | None = None
    run_kind: str | None = None
    notebook: str | None = None
    kernel_id: str | None = None
    session_id: str | None = None
    execution_state: str | None = None
    idle_s: float | None = None
    user: str | None = None  # another Unix user's process: only who, never what

    def to_dict(self) -> ProcessOwnerJson:
        """Field by field (flat: asdict's deep copy costs more than the whole lookup)."""
        return ProcessOwnerJson(
            kind=self.kind,
            label=self.label,
            run_id=self.run_id,
            run_name=self.run_name,
            run_kind=self.run_kind,
            notebook=self.notebook,
            kernel_id=self.kernel_id,
            session_id=self.session_id,
            execution_state=self.execution_state,
            idle_s=self.idle_s,
            user=self.user,
        )


class Attribution:
    """Maps GPU processes to owners and marks each GPU's leases and freedom. ``runs`` are run
    rows (active ones at least), ``leases`` the live leases, ``kernels`` the server's kernels by
    pid (None: recognise kernels by their command line), ``own_pids`` the asking process (a
    supervisor waiting for GPUs is not foreign to itself)."""

    def __init__(
        self,
        runs: Iterable,
        leases: Iterable[Lease],
        kernels: Mapping[int, KernelInfo] | None = None,
        own_pids: Iterable[int] = (),
        reported: Callable[[str], int | None] | None = None,
        lookup: Callable[[str], object] | None = None,
    ):
        """``lookup`` finds a run that is not among ``runs`` by its id (an ended run whose
        process lingers); without it such a process is named by the id alone."""
        self.runs = {run.id: run for run in runs}
        self.lookup = lookup or (lambda run_id: None)
        self.by_pid = {run.pid: run for run in self.runs.values() if run.pid and run.active}
        self.leases = list(leases)
        self.kernels, self.own = kernels, set(own_pids)
        self.reported = reported or (lambda run_id: None)

    def apply(self, snap: GpuSnapshot, threshold: int | None = None) -> GpuSnapshot:
        threshold = busy_threshold() if threshold is None else threshold
        for device in snap.devices:
            for proc in device.processes:
                proc.owner = self.owner_of(proc).to_dict()
            self._mark(device, threshold)
        return snap

    def owner_of(self, proc: GpuProcess) -> ProcessOwner:
        """Cheapest evidence first: the store's pids, the kernels' pids, the run id in the
        process's environment, then a kernel among its ancestors."""
        if proc.command is None:
            return ProcessOwner("outside", OUTSIDE)
        user = other_user(proc.pid)
        if user is not None:  # its command line, environment and notebook are that user's
            return ProcessOwner("user", f"{user} (another user)", user=user)
        run = self.by_pid.get(proc.pid) or self._tagged_run(proc.pid)
        kernel = self._kernel(proc.pid, ancestors=run is None)
        if run is not None:
            return _run_owner(run, kernel)
        if kernel is not None:
            return _kernel_owner(kernel)
        return ProcessOwner("other", f"other: {proc.command[:60]}")

    def _mark(self, device: GpuDevice, threshold: int) -> None:
        mine = [lease for lease in self.leases if lease.uuid == device.uuid]
        device.leases = [self._lease_record(lease) for lease in mine]
        holders = {lease.run_id for lease in mine}
        foreign = [
            p for p in device.processes if p.pid not in self.own and (p.owner and p.owner["run_id"]) not in holders
        ]
        device.foreign_memory = sum(p.used_memory or 0 for p in foreign)
        device.free = not mine and device.foreign_memory <= threshold

    def _lease_record(self, lease: Lease) -> GpuLease:
        """A lease as views show it. Another user's (on a box) says the user, the kind and the
        time only: its run's name, notebook and memory are that user's."""
        run = self.runs.get(lease.run_id) if lease.mine else None
        return GpuLease(
            **lease.to_dict(),
            run_name=getattr(run, "name", None),
            run_kind=getattr(run, "kind", None) or lease.kind,
            notebook=getattr(run, "notebook", None),
            reported_memory=self.reported(lease.run_id) if lease.mine else None,
            user=lease.user,
            mine=lease.mine,
        )

    def _tagged_run(self, pid: int):
        """The run a process carries the id of (a rank, a worker, a run's leftover process)."""
        run_id = environ_value(pid, RUN_ID_ENV)
        if not run_id:
            return None
        if run_id not in self.runs:
            self.runs[run_id] = self.lookup(run_id) or _Unlisted(run_id)
        return self.runs[run_id]

    def _kernel(self, pid: int, ancestors: bool = True) -> KernelInfo | None:
        for candidate in process_ancestors(pid, ANCESTORS if ancestors else 0):
            found = self.kernels.get(candidate) if self.kernels is not None else kernel_from_process(candidate)
            if found is not None:
                return found
        return None

    def usable(self, snap: GpuSnapshot) -> list[GpuSlot]:
        """The GPUs a new lease may take, best first: visible to the asking process, not busy
        with foreign processes (leases are checked by the store, in the lease's transaction)."""
        threshold = busy_threshold()
        self.apply(snap, threshold)
        return [
            GpuSlot(d.uuid, d.index)
            for d in snap.devices
            if d.uuid and d.visible_index is not None and (d.foreign_memory or 0) <= threshold
        ]


@dataclass
class _Unlisted:
    """A run id found on a process whose run is not among the rows at hand."""

    id: str
    name: str | None = None
    kind: str | None = None
    notebook: str | None = None
    status: str = "unknown"


def _run_owner(run, kernel: KernelInfo | None) -> ProcessOwner:
    where = f" · {os.path.basename(run.notebook)}" if run.notebook else ""
    state = "" if run.status in (RunStatus.RUNNING, RunStatus.QUEUED) else f", {run.status}"
    owner = ProcessOwner(
        "run",
        f"run {run.name or run.id} ({run.id}, {run.kind}{state}){where}",
        run_id=run.id,
        run_name=run.name,
        run_kind=str(run.kind) if run.kind else None,
        notebook=run.notebook,
    )
    if kernel is not None:
        owner.kernel_id, owner.session_id = kernel.kernel_id, kernel.session_id
        owner.execution_state, owner.idle_s = kernel.execution_state, kernel.idle_s
    return owner


def _kernel_owner(kernel: KernelInfo) -> ProcessOwner:
    notebook = os.path.basename(kernel.notebook) if kernel.notebook else "no notebook"
    return ProcessOwner(
        "kernel",
        f"kernel {kernel.kernel_id[:8]} · {notebook}",
        notebook=kernel.notebook,
        kernel_id=kernel.kernel_id,
        session_id=kernel.session_id,
        execution_state=kernel.execution_state,
        idle_s=kernel.idle_s,
    )


def other_user(pid: int) -> str | None:
    """The login name of the process's owner when that is another user than ours (root sees
    everyone's processes as theirs to name: an admin's view); None for our own or unknown."""
    me = os.getuid()
    if me == 0:
        return None
    uid = process_uid(pid)
    return None if uid is None or uid == me else user_name(uid)


def lease_holder(lease: Mapping, now: float) -> str:
    """Who holds a lease, in a few words: ``bob (job, 2 h)`` for another user's, else the
    run's name and id."""
    if lease.get("user") and not lease.get("mine", True):
        return f"{lease['user']} ({lease.get('run_kind') or 'run'}, {span(now - lease['since'])})"
    return f"run {lease.get('run_name') or lease['run_id']} ({lease['run_id']})"


def kernel_from_process(pid: int) -> KernelInfo | None:
    """A Jupyter kernel recognised from the process table alone (no server at hand): its
    connection file names its id, and jupyter_server gives it its notebook in
    ``JPY_SESSION_NAME``."""
    command = command_line(pid) or ""
    match = KERNEL_FILE.search(command) if "ipykernel" in command else None
    if match is None:
        return None
    return KernelInfo(match.group(1), pid, notebook=environ_value(pid, "JPY_SESSION_NAME"))
