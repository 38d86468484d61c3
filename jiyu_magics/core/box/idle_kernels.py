"""Kernels that hold GPU memory, as each user's Jupyter server reports them to the box's book,
and an admin's requests to reclaim one (``jiyu box idle``, ``jiyu box reclaim``).

A user's server reports its own kernels only (the keeper files them under the uid of the
connection); an admin asks, the user's server shuts the kernel down at its next report, and
only while it is idle: a kernel running a cell is never reclaimed (``server.box_kernels``).
Each request and each reclaim is in the book's change log with the user who made it.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from .book_rows import Refused, change, transaction
from .identity import Peer, uid_of, user_name
from .policy import Policy

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    uid INTEGER NOT NULL,
    kernel_id TEXT NOT NULL,
    gpus TEXT NOT NULL,
    memory INTEGER NOT NULL,
    idle_s REAL,
    busy INTEGER NOT NULL,
    reported REAL NOT NULL,
    reclaim_asked REAL,
    reclaim_by INTEGER,
    PRIMARY KEY (uid, kernel_id)
);
"""
REPORT_TTL_S = 120.0  # a user's server that stopped reporting: its kernels are no longer shown
DELETE_ALL = "DELETE FROM kernels WHERE uid = ?"
UPSERT = (
    "INSERT INTO kernels (uid, kernel_id, gpus, memory, idle_s, busy, reported) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (uid, kernel_id) DO UPDATE SET gpus = excluded.gpus, memory = excluded.memory, "
    "idle_s = excluded.idle_s, busy = excluded.busy, reported = excluded.reported"
)


class IdleKernels:
    """The book's kernel table, on the book's connection and lock."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock, policy: Callable[[], Policy]):
        self._db, self._lock, self.policy = db, lock, policy
        db.executescript(SCHEMA)

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db, self._lock)

    def report(self, peer: Peer, kernels: list[dict]) -> dict:
        """A user's Jupyter server reports its kernels that hold GPU memory; it hears which of
        them an admin asked to reclaim, and the policy's idle limit."""
        now = time.time()
        with self._tx() as db:
            ids = [k["kernel_id"] for k in kernels]
            marks = ", ".join("?" * len(ids))
            gone = f"DELETE FROM kernels WHERE uid = ? AND kernel_id NOT IN ({marks})" if ids else DELETE_ALL
            db.execute(gone, (peer.uid, *ids))
            db.executemany(UPSERT, [(peer.uid, *_row(k), now) for k in kernels])
            asked = [
                r["kernel_id"]
                for r in db.execute(
                    "SELECT kernel_id FROM kernels WHERE uid = ? AND reclaim_asked IS NOT NULL AND busy = 0",
                    (peer.uid,),
                )
            ]
        return {"reclaim": asked, "idle_kernel_s": self.policy().idle_kernel_s}

    def reclaimed(self, peer: Peer, kernel_id: str) -> dict:
        """The user's server shut the kernel down on an admin's request."""
        with self._tx() as db:
            db.execute("DELETE FROM kernels WHERE uid = ? AND kernel_id = ?", (peer.uid, kernel_id))
            change(db, peer, "reclaimed", peer.uid, None, f"kernel {kernel_id[:8]} shut down on an admin's request")
        return {}

    def idle(self, peer: Peer) -> dict:
        """Kernels idle past the policy's limit while holding GPU memory: every user's for an
        admin, the asker's own otherwise."""
        policy = self.policy()
        everyone = policy.is_admin(peer.uid, peer.user)
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM kernels WHERE reported > ? ORDER BY idle_s DESC", (time.time() - REPORT_TTL_S,)
            ).fetchall()
        return {
            "limit_s": policy.idle_kernel_s,
            "kernels": [
                {
                    "user": user_name(r["uid"]),
                    "kernel_id": r["kernel_id"],
                    "gpus": [int(g) for g in r["gpus"].split(",") if g],
                    "memory": r["memory"],
                    "idle_s": r["idle_s"],
                    "busy": bool(r["busy"]),
                    "over_limit": not r["busy"] and (r["idle_s"] or 0) >= policy.idle_kernel_s,
                    "reclaim_asked": r["reclaim_asked"],
                }
                for r in rows
                if everyone or r["uid"] == peer.uid
            ],
        }

    def reclaim(self, peer: Peer, user: str, kernel_prefix: str) -> dict:
        """An admin asks a user's server to shut down an idle kernel (never a busy one)."""
        policy = self.policy()
        if not policy.is_admin(peer.uid, peer.user):
            raise Refused(
                f"{peer.user} is not an admin of this box (admins in its policy): only they reclaim", "admins"
            )
        uid = uid_of(user)
        with self._tx() as db:
            rows = db.execute(
                "SELECT * FROM kernels WHERE uid = ? AND kernel_id LIKE ?", (uid, kernel_prefix + "%")
            ).fetchall()
            if len(rows) != 1:
                raise Refused(
                    f"{user} has {'no' if not rows else 'several'} kernel(s) {kernel_prefix!r} holding GPU memory",
                    "unknown",
                )
            kernel = rows[0]
            if kernel["busy"]:
                raise Refused(
                    f"kernel {kernel['kernel_id'][:8]} of {user} is running a cell: it is never reclaimed", "busy"
                )
            if (kernel["idle_s"] or 0) < policy.idle_kernel_s:
                raise Refused(
                    f"kernel {kernel['kernel_id'][:8]} of {user} has been idle {kernel['idle_s'] or 0:.0f} s, under "
                    f"idle_kernel_minutes ({policy.idle_kernel_minutes:g} min)",
                    "idle_kernel_minutes",
                )
            db.execute(
                "UPDATE kernels SET reclaim_asked = ?, reclaim_by = ? WHERE uid = ? AND kernel_id = ?",
                (time.time(), peer.uid, uid, kernel["kernel_id"]),
            )
            change(db, peer, "reclaim", uid, None, f"asked to shut down kernel {kernel['kernel_id'][:8]}")
        return {"kernel_id": kernel["kernel_id"]}


def _row(kernel: dict) -> tuple:
    gpus = ",".join(map(str, kernel["gpus"]))
    return (kernel["kernel_id"], gpus, int(kernel["memory"]), kernel["idle_s"], int(kernel["busy"]))
