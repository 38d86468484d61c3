"""What every table of the box's book shares: a transaction on the keeper's one connection, the
change log row each change writes (with the uid and pid that asked), and a refusal."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .identity import Peer

KEEPER_UID = -1  # the keeper's own changes (sweeping runs whose owner is gone, asking a run to yield)


class Refused(Exception):
    """A request the rules refuse: ``str()`` is one line naming the rule (and when it frees)."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule


@contextmanager
def transaction(db: sqlite3.Connection, lock: threading.Lock) -> Iterator[sqlite3.Connection]:
    """One writer at a time (the keeper's threads share one connection): ``BEGIN IMMEDIATE``
    under the lock, committed whole or rolled back."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def change(
    db: sqlite3.Connection, peer: Peer | None, action: str, owner: int | None, run_id: str | None, detail: str
) -> None:
    """A row of the change log: who (``peer``; None: the keeper itself), what, whose, which run."""
    db.execute(
        "INSERT INTO changes (at, uid, pid, action, owner_uid, run_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            time.time(),
            KEEPER_UID if peer is None else peer.uid,
            None if peer is None else peer.pid,
            action,
            owner,
            run_id,
            detail,
        ),
    )
