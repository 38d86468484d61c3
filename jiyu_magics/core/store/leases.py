"""GPU leases and the run queue, kept in the run store: the one arbiter of which run holds
which GPU on this machine.

There is no daemon. Every owner of a waiting run (a job's supervisor, a kernel's ``%%train
--nproc``) asks the store, in one ``BEGIN IMMEDIATE`` transaction, whether its run is next in
the queue and whether enough of the GPUs it may use are unleased; if so the leases are written
and the run turns ``starting`` in that same transaction, so two owners can never take one GPU
(and the schema's partial unique index ``one_exclusive_lease`` would refuse it if they tried).
Leases end in the transaction that ends their run (``transitions.move``), so no
lease outlives its run, whatever the end.

The queue is strict: first by ``priority`` (higher first), then by ``queue_rank`` (the
submission time unless ``to_top`` moved the run up). A run waits while any run ahead of it
waits, even if a smaller request would fit: big requests are never starved. Runs that want no
GPU (``gpus_requested = 0``) queue apart, only when a limit of concurrent CPU jobs is set.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..runs.model import RunStatus
from .database import StoreDatabase
from .run_row import RunGpu
from .transitions import move

LIVE = "ended IS NULL"
QUEUE_ORDER = "priority DESC, COALESCE(queue_rank, created) ASC, created ASC"


@dataclass(frozen=True)
class GpuSlot:
    """A GPU an owner may lease: NVML's index and UUID."""

    uuid: str
    index: int


@dataclass
class Lease:
    uuid: str
    index: int
    run_id: str
    since: float
    ended: float | None = None
    shared: bool = False
    # on a box (``box_leases``): whose it is and what kind of run, as every user sees it
    user: str | None = None
    kind: str | None = None
    mine: bool = True

    def to_dict(self) -> RunGpu:
        return RunGpu(
            uuid=self.uuid, index=self.index, run_id=self.run_id, since=self.since, ended=self.ended, shared=self.shared
        )

    @classmethod
    def from_row(cls, row) -> Lease:
        return cls(row["uuid"], row["gpu_index"], row["run_id"], row["since"], row["ended"], bool(row["shared"]))


@dataclass
class Waiting:
    """A queued run as the queue sees it: its place and what it waits for."""

    run_id: str
    gpus: int
    priority: int
    position: int  # 1-based, within the runs waiting for the same kind of resource


@dataclass
class Turn:
    """A queued run's turn: its place, whether it may lease now, and why not."""

    position: int | None
    head: bool
    reason: str | None = None  # why it waits, when a rule says (a box's per-user limit, fair share)
    preempting: str | None = None  # whose preemptible runs were asked to yield for it


class LeaseBook:
    blocks = False  # whether turn/acquire wait for the queue to move themselves (a box's book)

    def __init__(self, db: StoreDatabase, host: str):
        self.db, self.host = db, host
        self.last_turn: Turn | None = None  # a box's word on the last ``acquire`` that leased nothing
        self.top_note: str | None = None  # a box's rule that limited the last ``to_top``

    # -- reading -------------------------------------------------------------------------------
    def live(self) -> list[Lease]:
        with self.db.read() as db:
            rows = db.execute(f"SELECT * FROM gpu_leases WHERE {LIVE} ORDER BY gpu_index, since").fetchall()
        return [Lease.from_row(r) for r in rows]

    def of_runs(self, run_ids: Sequence[str]) -> dict[str, list[Lease]]:
        """Every lease (live or ended) of these runs, by run id: what each run holds or held."""
        found: dict[str, list[Lease]] = {}
        if not run_ids:
            return found
        with self.db.read() as db:
            for chunk in _chunks(list(run_ids), 500):
                rows = db.execute(
                    f"SELECT * FROM gpu_leases WHERE run_id IN ({', '.join('?' * len(chunk))}) ORDER BY gpu_index",
                    chunk,
                ).fetchall()
                for row in rows:
                    found.setdefault(row["run_id"], []).append(Lease.from_row(row))
        return found

    def queue(self) -> list[Waiting]:
        """The runs waiting on this host, in the order they will start."""
        with self.db.read() as db:
            return _queue(db, self.host)

    def turn(self, run_id: str) -> Turn:
        """The queued run's place; the head is first among the runs waiting for GPUs."""
        place = next((w.position for w in self.queue() if w.run_id == run_id and w.gpus > 0), None)
        return Turn(place, place == 1)

    def ended(self, run_ids: Sequence[str]) -> None:
        """The runs ended (their leases ended in the transaction that ended them): nothing
        more to do here; a box's book hears of it (``box_leases``)."""

    def others_waiting(self) -> list[dict]:
        """Other users' waiting runs (on a box): position, user, kind, GPUs, since, why."""
        return []

    def reconcile(self, active: Sequence[str]) -> list[str]:
        """A box's book told of runs that ended while it was out (``box_leases``); nothing here."""
        return []

    def owner_of(self, run_id: str) -> str | None:
        """Another user whose run this id names (on a box), for a refusal that says whose."""
        return None

    def preempt_wanted(self, run_id: str) -> bool:
        """Whether another user's run asked this one to yield its GPUs: only on a box."""
        return False

    def requeue(self, run_id: str) -> None:
        """A preempted run's leases end and it waits again (``RunLifecycle.requeue``; in the
        transaction that moves it back to queued, ``transitions.move`` ends its leases here)."""

    # -- taking and ending ---------------------------------------------------------------------
    def acquire(self, run_id: str, slots: Sequence[GpuSlot]) -> list[Lease] | None:
        """Leases for the queued run ``run_id`` on ``gpus_requested`` of ``slots`` (the GPUs its
        owner found usable, in order of preference), and the run ``starting``, in one
        transaction; None when it is not the run's turn or too few of them are unleased (a run
        asked with ``share`` may also join GPUs whose every lease is shared). The time is read
        inside the transaction: a lease never starts before the one it follows ended."""
        with self.db.write() as db:
            now = time.time()
            want, share = _next_wanting(db, self.host, run_id)
            if not want:
                return None
            chosen = _pick(slots, _live_by_uuid(db), want, share)
            if chosen is None:
                return None
            db.executemany(
                "INSERT INTO gpu_leases (uuid, gpu_index, run_id, host, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
                [(s.uuid, s.index, run_id, self.host, now, int(share)) for s in chosen],
            )
            move(db, run_id, {RunStatus.QUEUED}, RunStatus.STARTING, "its GPUs were leased")
        return [Lease(s.uuid, s.index, run_id, now, shared=share) for s in chosen]

    def restore(self, leases: Sequence[Lease]) -> None:
        """Live leases written back as they were (an owner registering its run again in a
        store that was lost): the GPUs its ranks still use are nobody else's."""
        with self.db.write() as db:
            for lease in leases:
                if db.execute(
                    f"SELECT 1 FROM gpu_leases WHERE uuid = ? AND run_id = ? AND {LIVE}", (lease.uuid, lease.run_id)
                ).fetchone():
                    continue
                db.execute(
                    "INSERT INTO gpu_leases (uuid, gpu_index, run_id, host, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
                    (lease.uuid, lease.index, lease.run_id, self.host, lease.since, int(lease.shared)),
                )

    def admit(self, run_id: str, cpu_limit: int | None) -> bool:
        """A run that wants no GPU starts when it is first among those and fewer than
        ``cpu_limit`` of them run (no limit: at once); then it is ``starting``."""
        with self.db.write() as db:
            if cpu_limit is not None:
                head = [w for w in _queue(db, self.host) if w.gpus == 0][:1]
                started = (RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING)
                running = db.execute(
                    "SELECT COUNT(*) FROM runs WHERE status IN (?, ?, ?) AND host = ? "
                    "AND backend = 'local' AND gpus_requested = 0",
                    (*started, self.host),
                ).fetchone()[0]
                if not head or head[0].run_id != run_id or running >= cpu_limit:
                    return False
            row = db.execute("SELECT status, stop_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["status"] != RunStatus.QUEUED or row["stop_requested"]:
                return False
            move(db, run_id, {RunStatus.QUEUED}, RunStatus.STARTING, "a CPU job slot was free")
            return True

    def record(self, run_id: str, slot: GpuSlot) -> tuple[Lease, list[str]]:
        """The lease of a run that already trains on ``slot`` (an in-kernel ``%%train``: it
        cannot wait). Shared when other runs hold the GPU; returns it and their ids."""
        with self.db.write() as db:
            now = time.time()
            holders = [
                r["run_id"]
                for r in db.execute(
                    f"SELECT run_id FROM gpu_leases WHERE uuid = ? AND {LIVE} AND run_id != ?", (slot.uuid, run_id)
                )
            ]
            if (
                db.execute(
                    f"SELECT 1 FROM gpu_leases WHERE uuid = ? AND run_id = ? AND {LIVE}", (slot.uuid, run_id)
                ).fetchone()
                is None
            ):
                db.execute(
                    "INSERT INTO gpu_leases (uuid, gpu_index, run_id, host, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
                    (slot.uuid, slot.index, run_id, self.host, now, int(bool(holders))),
                )
        return Lease(slot.uuid, slot.index, run_id, now, shared=bool(holders)), holders

    def to_top(self, run_id: str) -> int:
        """Moves a queued run ahead of every other waiting run: the highest waiting priority,
        and a rank before the first. Returns its new position (1)."""
        with self.db.write() as db:
            row = db.execute("SELECT status, host FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None or row["status"] != RunStatus.QUEUED:
                raise ValueError(f"run {run_id} is not queued")
            top = db.execute(
                "SELECT MAX(priority), MIN(COALESCE(queue_rank, created)) FROM runs WHERE status = ? AND host = ?",
                (RunStatus.QUEUED, row["host"]),
            ).fetchone()
            db.execute("UPDATE runs SET priority = ?, queue_rank = ? WHERE id = ?", (top[0], top[1] - 1.0, run_id))
        return 1


def _queue(db, host: str) -> list[Waiting]:
    rows = db.execute(
        f"SELECT id, gpus_requested, priority FROM runs WHERE status = ? AND host = ? AND "
        f"backend = 'local' AND gpus_requested IS NOT NULL ORDER BY {QUEUE_ORDER}",
        (RunStatus.QUEUED, host),
    ).fetchall()
    counters = {True: 0, False: 0}
    waiting = []
    for row in rows:
        wants_gpu = row["gpus_requested"] > 0
        counters[wants_gpu] += 1
        waiting.append(Waiting(row["id"], row["gpus_requested"], row["priority"], counters[wants_gpu]))
    return waiting


def _next_wanting(db, host: str, run_id: str) -> tuple[int, bool]:
    """How many GPUs ``run_id`` wants if it is the first run waiting for GPUs (else 0), and
    whether it shares."""
    row = db.execute("SELECT status, stop_requested, share FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None or row["status"] != RunStatus.QUEUED or row["stop_requested"]:
        return 0, False
    head = next((w for w in _queue(db, host) if w.gpus > 0), None)
    return (head.gpus if head is not None and head.run_id == run_id else 0), bool(row["share"])


def _live_by_uuid(db) -> dict[str, list[bool]]:
    held: dict[str, list[bool]] = {}
    for row in db.execute(f"SELECT uuid, shared FROM gpu_leases WHERE {LIVE}"):
        held.setdefault(row["uuid"], []).append(bool(row["shared"]))
    return held


def _pick(slots: Sequence[GpuSlot], held: dict[str, list[bool]], want: int, share: bool) -> list[GpuSlot] | None:
    """Unleased GPUs first (lowest index first); a sharing run then GPUs only shared so far."""
    free = [s for s in slots if s.uuid not in held]
    if share:
        free += [s for s in slots if s.uuid in held and all(held[s.uuid])]
    return free[:want] if len(free) >= want else None


def _chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
