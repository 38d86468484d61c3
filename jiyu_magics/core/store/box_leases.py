"""The lease book of a run store on a box: the box's book decides, the home store mirrors.

On a machine with a box (``core.box``), every lease and every place in the queue is the box's
book's, so one user's run waits for another user's lease and no GPU is leased twice. The run
store in the user's own home keeps what it always kept (the run rows, and a copy of each of
its runs' leases, for listings, ``jiyu usage`` and a run's GPUs) and writes it after the book
agreed: a lease is taken in the book first, then written here with the run turned
``starting``; when that write is refused (a stop came first) the book's lease is released at
once. When a run ends its leases end here in the transaction that ends it, and the book hears
it right after (``ended``); a book that could not be told frees them anyway once the run's
owner process is gone, and the run owners' upkeep tells it again (``jobs.upkeep``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..box.client import BoxClient, BoxRefused, BoxUnreachable
from ..box.location import BoxLocation, find
from ..runs.files import StoreUnusable
from ..runs.model import RunStatus
from .database import StoreDatabase
from .leases import GpuSlot, Lease, LeaseBook, Turn, Waiting
from .transitions import move


def lease_book(db: StoreDatabase, host: str) -> LeaseBook:
    """The box's book when this machine has a box (``core.box.location``: one stat of the
    default folder when ``JIYU_BOX`` is unset), else the home store's own."""
    location = find()
    return LeaseBook(db, host) if location is None else BoxLeaseBook(db, host, location)


WAIT_BLOCK_S = 1.0  # as long as a waiting run's owner slept between polls before the box


class BoxLeaseBook(LeaseBook):
    blocks = True  # its turn and acquire wait in the keeper: the owner polls again at once

    def __init__(self, db: StoreDatabase, host: str, location: BoxLocation):
        super().__init__(db, host)
        self.box = BoxClient(location)

    # -- reading -------------------------------------------------------------------------------
    def live(self) -> list[Lease]:
        """Every user's live leases on the box, each with its user and kind."""
        return [
            Lease(
                lease["uuid"],
                lease["index"],
                lease["run_id"],
                lease["since"],
                shared=lease["shared"],
                user=lease["user"],
                kind=lease["kind"],
                mine=lease["mine"],
            )
            for lease in self._status()["leases"]
        ]

    def queue(self) -> list[Waiting]:
        """This user's waiting runs with their places in the box-wide queue (runs wanting no
        GPU queue here, apart)."""
        try:
            status = self._status()
        except StoreUnusable:  # a listing goes on without places; the waiting line says why
            return [w for w in super().queue() if w.gpus == 0]
        mine = [Waiting(w["run_id"], w["gpus"], w["priority"], w["position"]) for w in status["queue"] if w["mine"]]
        return mine + [w for w in super().queue() if w.gpus == 0]

    def others_waiting(self) -> list[dict]:
        return [
            {
                "queue_position": w["position"],
                "user": w["user"],
                "kind": w["kind"],
                "id": w["run_id"],
                "gpus_requested": w["gpus"],
                "created": w["queued"],
                "queue_reason": w["waiting_reason"],
            }
            for w in self._status()["queue"]
            if not w["mine"]
        ]

    def turn(self, run_id: str) -> Turn:
        """Its turn, the keeper answering once the run may lease or after ``WAIT_BLOCK_S``:
        a waiting owner hears of a release at once instead of at its next poll."""
        answer = self.box.call("wait", **self._entry(run_id), block=WAIT_BLOCK_S)
        return Turn(answer["position"], answer["head"], answer.get("reason"))

    # -- taking and ending ---------------------------------------------------------------------
    def acquire(self, run_id: str, slots: Sequence[GpuSlot]) -> list[Lease] | None:
        """The book's leases on ``slots``, then the same leases here and the run ``starting``
        in one transaction of the home store. ``last_turn`` says why when there are none."""
        if not slots:
            return None
        answer = self.box.call(
            "acquire", **self._entry(run_id), slots=[[s.uuid, s.index] for s in slots], block=WAIT_BLOCK_S
        )
        self.last_turn = Turn(
            answer.get("position"), answer.get("head", False), answer.get("reason"), answer.get("preempting")
        )
        granted = answer.get("leases")
        if not granted:
            return None
        leases = [Lease(g["uuid"], g["index"], run_id, g["since"], shared=g["shared"]) for g in granted]
        try:
            with self.db.write() as db:
                row = db.execute("SELECT status, stop_requested FROM runs WHERE id = ?", (run_id,)).fetchone()
                if row is None or row["status"] != RunStatus.QUEUED or row["stop_requested"]:
                    raise _NotQueued
                _insert(db, self.host, leases)
                move(db, run_id, {RunStatus.QUEUED}, RunStatus.STARTING, "its GPUs were leased in the box's book")
        except _NotQueued:
            self._release([run_id])
            return None
        except BaseException:
            self._release([run_id])
            raise
        return leases

    def record(self, run_id: str, slot: GpuSlot) -> tuple[Lease, list[str]]:
        """An in-kernel training's lease: the book refuses a GPU another user leases
        (``BoxRefused``, one line naming who), shares one the user's own runs hold."""
        answer = self.box.call("record", run=run_id, kind="kernel", slot=[slot.uuid, slot.index])
        granted = next(g for g in answer["leases"] if g["uuid"] == slot.uuid)
        lease = Lease(slot.uuid, slot.index, run_id, granted["since"], shared=granted["shared"])
        with self.db.write() as db:
            if not db.execute(
                "SELECT 1 FROM gpu_leases WHERE uuid = ? AND run_id = ? AND ended IS NULL", (slot.uuid, run_id)
            ).fetchone():
                _insert(db, self.host, [lease])
        return lease, list(answer.get("sharing", []))

    def to_top(self, run_id: str) -> int:
        answer = self.box.call("top", run=run_id)
        if answer.get("rule"):
            self.top_note = answer["rule"]
        return int(answer.get("position") or 1)

    def ended(self, run_ids: Sequence[str]) -> None:
        self._release(run_ids)

    def reconcile(self, active: Sequence[str]) -> list[str]:
        """Ends the book's leases and places of this user's runs that ended here while the
        book could not be told (its keeper was down); the run ids it released."""
        try:
            status = self.box.call("status")
        except (BoxUnreachable, BoxRefused):
            return []
        held = {lease["run_id"] for lease in status["leases"] if lease["mine"]}
        held |= {w["run_id"] for w in status["queue"] if w["mine"]}
        with self.db.read() as db:
            known = (
                {
                    row[0]
                    for row in db.execute(f"SELECT id FROM runs WHERE id IN ({', '.join('?' * len(held))})", [*held])
                }
                if held
                else set()
            )
        stale = sorted(run_id for run_id in held if run_id in known and run_id not in set(active))
        self._release(stale)
        return stale

    def owner_of(self, run_id: str) -> str | None:
        try:
            answer = self.box.call("owner", run=run_id.lower())
        except (BoxUnreachable, BoxRefused):
            return None
        users = answer["users"]
        return None if answer["mine"] or len(users) != 1 else users[0]

    def preempt_wanted(self, run_id: str) -> bool:
        try:
            return bool(self.box.call("check", run=run_id)["preempt"])
        except BoxUnreachable:
            return False

    def requeue(self, run_id: str) -> None:
        self.box.call("requeue", run=run_id)

    def _status(self) -> dict:
        """The book as this user may see it. A refusal (not a member of the box's group) is,
        for a reader, a book it cannot use: its one line, where views say why owners are missing."""
        try:
            return self.box.call("status")
        except BoxRefused as refused:
            raise StoreUnusable(str(refused)) from None

    def _release(self, run_ids: Sequence[str]) -> None:
        """Tells the book; when it cannot be told, it frees them once the owner is gone."""
        for run_id in run_ids:
            try:
                self.box.call("release", run=run_id)
            except (BoxUnreachable, BoxRefused):
                pass

    def _entry(self, run_id: str) -> dict:
        """What the book knows of a queued run: kind, GPUs, order; never its name or notebook."""
        with self.db.read() as db:
            row = db.execute(
                "SELECT kind, gpus_requested, priority, share, preemptible, queue_rank, created FROM runs WHERE id = ?",
                (run_id,),
            ).fetchone()
        if row is None:
            raise BoxRefused(f"no run {run_id} in this run store", "unknown")
        return {
            "run": run_id,
            "kind": row["kind"],
            "gpus": int(row["gpus_requested"] or 0),
            "priority": int(row["priority"] or 0),
            "share": bool(row["share"]),
            "preemptible": bool(row["preemptible"]),
            "queued": float(row["queue_rank"] or row["created"] or time.time()),
        }


class _NotQueued(Exception):
    """The run stopped waiting while the book leased: the book's lease goes back."""


def _insert(db, host: str, leases: Sequence[Lease]) -> None:
    db.executemany(
        "INSERT INTO gpu_leases (uuid, gpu_index, run_id, host, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
        [(lease.uuid, lease.index, lease.run_id, host, lease.since, int(lease.shared)) for lease in leases],
    )
