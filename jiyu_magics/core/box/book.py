"""The box's book: every user's GPU leases and waiting runs, in one SQLite file that only the
book keeper opens (``keeper``). Each operation takes the asking process's identity as the
kernel gave it to the keeper (``identity.Peer``), never from the request, and each change is
written to the ``changes`` table with the uid and pid that made it.

The book holds only what every user may see of another's run: the user, the kind of run, its
GPUs and times. Names, notebooks, paths and logs stay in each user's own run store.

Rules (``queue_order``): a run leases only when it is the head of the box-wide queue and its
user is within the policy's per-user limit; a lease is written in the transaction that checks
the GPUs are unleased (a partial unique index makes a second exclusive live lease on one GPU
impossible anyway). A run whose owner process is gone (its pid and start time, read by the
keeper when it asked) holds nothing: it is swept before each decision. A run that waited past
the policy's ``preempt_after_minutes`` asks other users' ``--preemptible`` runs to yield; their
owners see it (``check``), stop them with a checkpoint and put them back in the queue
(``requeue``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..processes.info import process_alive, process_start_time
from . import queue_order as rules
from .book_rows import KEEPER_UID, Refused, change, transaction
from .identity import Peer, span, user_name
from .idle_kernels import IdleKernels
from .policy import Policy

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    uid INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    share INTEGER NOT NULL DEFAULT 0,
    preemptible INTEGER NOT NULL DEFAULT 0,
    queued REAL NOT NULL,
    jumped REAL,
    state TEXT NOT NULL,
    started REAL,
    ended REAL,
    preempt_asked REAL,
    owner_pid INTEGER NOT NULL,
    owner_started REAL,
    PRIMARY KEY (uid, run_id)
);
CREATE INDEX IF NOT EXISTS live_entries ON entries(state) WHERE state != 'ended';
CREATE TABLE IF NOT EXISTS leases (
    uuid TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    since REAL NOT NULL,
    ended REAL,
    shared INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS leases_by_run ON leases(uid, run_id);
CREATE UNIQUE INDEX IF NOT EXISTS one_exclusive_lease ON leases(uuid) WHERE ended IS NULL AND shared = 0;
CREATE TABLE IF NOT EXISTS changes (
    at REAL NOT NULL,
    uid INTEGER NOT NULL,
    pid INTEGER,
    action TEXT NOT NULL,
    owner_uid INTEGER,
    run_id TEXT,
    detail TEXT
);
"""
LIVE = "ended IS NULL"


class Book:
    def __init__(self, path: Path, policy: Callable[[], Policy]):
        self.path, self.policy = path, policy
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.executescript(SCHEMA)
        self.kernels = IdleKernels(self._db, self._lock, policy)
        # every change that can move the queue (a lease, a release, a new or swept run) bumps
        # the version: waiting owners blocked in ``wait``/``acquire`` wake at once
        self._changed = threading.Condition()
        self._version = 0

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; one that logged a change wakes the owners waiting for one."""
        with transaction(self._db, self._lock) as db:
            before = db.execute("SELECT MAX(rowid) FROM changes").fetchone()[0]
            yield db
            changed = db.execute("SELECT MAX(rowid) FROM changes").fetchone()[0] != before
        if changed:
            with self._changed:
                self._version += 1
                self._changed.notify_all()

    def _await_change(self, seen: int, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout)

    def close(self) -> None:
        self._db.close()

    # -- waiting and leasing -----------------------------------------------------------------
    def wait(self, peer: Peer, run: dict[str, Any], block: float = 0.0) -> dict:
        """Puts the run in the queue (or refreshes its owner) and says its turn; while it may
        not lease, waits up to ``block`` seconds for the queue to move it to the head (each
        change is looked at here, so a run still behind others stays waiting quietly)."""
        deadline = time.monotonic() + block
        seen = self._version
        reply = self._wait_once(peer, run)
        while not reply["head"] and (left := deadline - time.monotonic()) > 0:
            self._await_change(seen, left)
            seen = self._version
            with self._lock:
                reply = self._turn_reply(self._db, self._entry(self._db, peer.uid, run["run"]))
        return reply

    def _wait_once(self, peer: Peer, run: dict[str, Any]) -> dict:
        with self._tx() as db:
            self._sweep(db)
            entry = self._enter(db, peer, run)
            return self._turn_reply(db, entry)

    def acquire(self, peer: Peer, run: dict[str, Any], slots: list[tuple[str, int]], block: float = 0.0) -> dict:
        """Leases for the run on ``slots`` (the GPUs its owner found usable, best first) when it
        is the head of the queue and enough are unleased; else, after waiting up to ``block``
        seconds for a change (a release) and trying once more, its turn and why it waits (its
        owner then reads the GPUs again: a freed GPU may have been busy when it last looked)."""
        seen = self._version
        reply = self._acquire_once(peer, run, slots)
        if "leases" in reply or block <= 0:
            return reply
        self._await_change(seen, block)
        return self._acquire_once(peer, run, slots)

    def _acquire_once(self, peer: Peer, run: dict[str, Any], slots: list[tuple[str, int]]) -> dict:
        with self._tx() as db:
            self._sweep(db)
            entry = self._enter(db, peer, run)
            if entry.state == "holding":  # a retry whose first answer was lost
                return {"leases": self._leases_of(db, entry.uid, entry.run_id)}
            reply = self._turn_reply(db, entry)
            if not reply["head"]:
                return reply
            held = self._held(db)
            chosen = rules.pick(slots, held, entry.gpus, entry.share)
            if not chosen:
                reply["reason"], reply["preempting"] = self._why_no_gpus(db, entry, slots, held)
                return reply
            now = time.time()
            db.executemany(
                "INSERT INTO leases (uuid, gpu_index, uid, run_id, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
                [(uuid, index, peer.uid, entry.run_id, now, int(entry.share)) for uuid, index in chosen],
            )
            db.execute(
                "UPDATE entries SET state = 'holding', started = ?, preempt_asked = NULL WHERE uid = ? AND run_id = ?",
                (now, peer.uid, entry.run_id),
            )
            gpus = ",".join(str(index) for _, index in chosen)
            change(db, peer, "lease", peer.uid, entry.run_id, f"GPU {gpus} for a {entry.kind}")
            return {"leases": self._leases_of(db, peer.uid, entry.run_id)}

    def record(self, peer: Peer, run: dict[str, Any], slot: tuple[str, int]) -> dict:
        """The lease of an in-kernel training on the GPU it already uses (it cannot wait):
        shared with the user's own runs there, refused when another user leases that GPU or
        the user would pass the per-user limit."""
        uuid, index = slot
        with self._tx() as db:
            self._sweep(db)
            holders = [h for h in self._held(db) if h.uuid == uuid]
            foreign = [h for h in holders if h.uid != peer.uid]
            if foreign:
                raise Refused(
                    f"GPU {index} is leased by {self._describe(db, foreign)}: train on a free GPU "
                    f"({self._free_line(db)})",
                    "leased",
                )
            mine = [h for h in holders if h.run_id != run["run"]]
            existing = db.execute(
                f"SELECT 1 FROM leases WHERE uid = ? AND run_id = ? AND uuid = ? AND {LIVE}",
                (peer.uid, run["run"], uuid),
            ).fetchone()
            if existing is None:
                cap = self.policy().cap()
                held = self._usage(db).held.get(peer.uid, 0)
                if cap is not None and held + 1 > cap:
                    raise Refused(
                        f"{peer.user} holds {held} of {cap} GPUs allowed per user (max_gpus_per_user): "
                        "this training may use a GPU once one of them frees",
                        "max_gpus_per_user",
                    )
                entry = self._enter(db, peer, {**run, "gpus": 1})
                now = time.time()
                db.execute(
                    "INSERT INTO leases (uuid, gpu_index, uid, run_id, since, shared) VALUES (?, ?, ?, ?, ?, ?)",
                    (uuid, index, peer.uid, entry.run_id, now, int(bool(mine))),
                )
                db.execute(
                    "UPDATE entries SET state = 'holding', started = ? WHERE uid = ? AND run_id = ?",
                    (now, peer.uid, entry.run_id),
                )
                change(db, peer, "lease", peer.uid, entry.run_id, f"GPU {index} for a {entry.kind} (in-kernel)")
            return {"leases": self._leases_of(db, peer.uid, run["run"]), "sharing": [h.run_id for h in mine]}

    def release(self, peer: Peer, run_id: str) -> dict:
        """Ends the run's leases and its place: its owner's (or an admin's) word that it ended."""
        with self._tx() as db:
            owner = self._owner_for_change(db, peer, run_id, "end its lease")
            now = time.time()
            ended = db.execute(
                f"UPDATE leases SET ended = ? WHERE uid = ? AND run_id = ? AND {LIVE}", (now, owner, run_id)
            ).rowcount
            changed = db.execute(
                "UPDATE entries SET state = 'ended', ended = ? WHERE uid = ? AND run_id = ? AND state != 'ended'",
                (now, owner, run_id),
            ).rowcount
            if ended or changed:
                change(db, peer, "release", owner, run_id, f"{ended} lease(s) ended")
            return {"released": ended}

    def requeue(self, peer: Peer, run_id: str) -> dict:
        """A preempted run back in the queue: its leases end, it waits again at its old place
        among its user's runs, behind the runs it yielded to (``preempt_asked`` stays until it
        leases again: the queue's order reads it)."""
        with self._tx() as db:
            owner = self._owner_for_change(db, peer, run_id, "requeue it")
            now = time.time()
            db.execute(f"UPDATE leases SET ended = ? WHERE uid = ? AND run_id = ? AND {LIVE}", (now, owner, run_id))
            db.execute(
                "UPDATE entries SET state = 'waiting', started = NULL, owner_pid = ?, "
                "owner_started = ? WHERE uid = ? AND run_id = ?",
                (peer.pid, process_start_time(peer.pid), owner, run_id),
            )
            change(db, peer, "requeue", owner, run_id, "preempted: back in the queue")
            return {"requeued": True}

    def top(self, peer: Peer, run_id: str) -> dict:
        """Moves a waiting run up: ahead of every run when its user may jump the queue (policy
        ``may_jump_queue``, admins), else ahead of that user's own runs only."""
        policy = self.policy()
        with self._tx() as db:
            owner = self._owner_for_change(db, peer, run_id, "move it in the queue")
            entry = self._entry(db, owner, run_id)
            if entry is None or entry.state != "waiting":
                raise Refused(f"run {run_id} is not waiting in the box's queue", "not-queued")
            if policy.may_jump(peer.uid, peer.user):
                db.execute("UPDATE entries SET jumped = ? WHERE uid = ? AND run_id = ?", (time.time(), owner, run_id))
                change(db, peer, "top", owner, run_id, "moved ahead of every waiting run")
                return {"ahead_of": "everyone", **self._turn_reply(db, self._entry(db, owner, run_id))}
            first = db.execute(
                "SELECT MAX(priority), MIN(queued) FROM entries WHERE uid = ? AND state = 'waiting'", (owner,)
            ).fetchone()
            db.execute(
                "UPDATE entries SET priority = ?, queued = ? WHERE uid = ? AND run_id = ?",
                (first[0], first[1] - 1.0, owner, run_id),
            )
            change(db, peer, "top", owner, run_id, "moved ahead of its user's own runs")
            return {
                "ahead_of": "own",
                "rule": f"{peer.user} may not move runs ahead of other users' (may_jump_queue in the box's policy)",
                **self._turn_reply(db, self._entry(db, owner, run_id)),
            }

    def check(self, peer: Peer, run_id: str) -> dict:
        """Whether the run was asked to yield its GPUs (preemption), for its owner's watch."""
        with self._lock:
            row = self._db.execute(
                "SELECT preempt_asked, state FROM entries WHERE uid = ? AND run_id = ?", (peer.uid, run_id)
            ).fetchone()
        return {
            "known": row is not None,
            "state": row["state"] if row else None,
            "preempt": bool(row and row["preempt_asked"] and row["state"] == "holding"),
        }

    # -- reading -----------------------------------------------------------------------------
    def status(self, peer: Peer) -> dict:
        """What the box holds and who waits, as any member sees it: user, kind, GPUs, times."""
        policy = self.policy()
        with self._lock:
            db = self._db
            alive = self._live_entries(db, check_owners=True)
            leases = [
                {
                    "uuid": r["uuid"],
                    "index": r["gpu_index"],
                    "run_id": r["run_id"],
                    "uid": r["uid"],
                    "user": user_name(r["uid"]),
                    "kind": alive[r["uid"], r["run_id"]].kind,
                    "since": r["since"],
                    "shared": bool(r["shared"]),
                    "mine": r["uid"] == peer.uid,
                }
                for r in db.execute(f"SELECT * FROM leases WHERE {LIVE} ORDER BY gpu_index, since")
                if (r["uid"], r["run_id"]) in alive
            ]
            turns = rules.order(alive.values(), self._usage(db), policy.cap())
        queue = [_turn_record(turn, peer) for turn in turns]
        return {
            "me": {"uid": peer.uid, "user": peer.user, "admin": policy.is_admin(peer.uid, peer.user)},
            "leases": leases,
            "queue": queue,
            "policy": policy.to_dict(),
        }

    def owner(self, peer: Peer, run_id: str) -> dict:
        """Whose run this is (a refusal names the owner): the users with a run of that id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT uid FROM entries WHERE run_id LIKE ?", (run_id.replace("%", "") + "%",)
            ).fetchall()
        return {"users": [user_name(r["uid"]) for r in rows], "mine": any(r["uid"] == peer.uid for r in rows)}

    def usage(self, peer: Peer, since: float) -> dict:
        """GPU-seconds per user since ``since``, from the lease history (each lease one GPU)."""
        now = time.time()
        with self._lock:
            rows = self._db.execute(
                "SELECT uid, SUM(MIN(COALESCE(ended, ?), ?) - MAX(since, ?)) AS gpu_s, COUNT(DISTINCT run_id) AS runs "
                "FROM leases WHERE COALESCE(ended, ?) > ? GROUP BY uid",
                (now, now, since, now, since),
            ).fetchall()
        return {"users": [{"user": user_name(r["uid"]), "gpu_s": r["gpu_s"], "runs": r["runs"]} for r in rows]}

    def changes(self, peer: Peer, limit: int = 50) -> dict:
        """The change log: everyone's for an admin, else the changes to the asker's own runs."""
        policy = self.policy()
        everyone = policy.is_admin(peer.uid, peer.user)
        where, values = ("", ()) if everyone else ("WHERE owner_uid = ? OR uid = ?", (peer.uid, peer.uid))
        with self._lock:
            rows = self._db.execute(
                f"SELECT * FROM changes {where} ORDER BY rowid DESC LIMIT ?", (*values, int(limit))
            ).fetchall()
        return {
            "changes": [
                {
                    "at": r["at"],
                    "by": "keeper" if r["uid"] == KEEPER_UID else user_name(r["uid"]),
                    "pid": r["pid"],
                    "action": r["action"],
                    "owner": None if r["owner_uid"] is None else user_name(r["owner_uid"]),
                    "run_id": r["run_id"],
                    "detail": r["detail"],
                }
                for r in reversed(rows)
            ]
        }

    # -- inside a transaction ----------------------------------------------------------------
    def _enter(self, db: sqlite3.Connection, peer: Peer, run: dict[str, Any]) -> rules.Entry:
        """The run's entry, made on its first request; the asking process becomes its owner
        (its death frees the run's place and leases)."""
        entry = self._entry(db, peer.uid, run["run"])
        started = process_start_time(peer.pid)
        if entry is None or entry.state == "ended":
            db.execute(
                "INSERT OR REPLACE INTO entries (uid, run_id, kind, gpus, priority, share, preemptible, queued, state, "
                "owner_pid, owner_started) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'waiting', ?, ?)",
                (
                    peer.uid,
                    run["run"],
                    run["kind"],
                    int(run["gpus"]),
                    int(run.get("priority", 0)),
                    int(bool(run.get("share"))),
                    int(bool(run.get("preemptible"))),
                    float(run.get("queued") or time.time()),
                    peer.pid,
                    started,
                ),
            )
            change(db, peer, "queue", peer.uid, run["run"], f"a {run['kind']} wants {int(run['gpus'])} GPU(s)")
        else:
            db.execute(
                "UPDATE entries SET owner_pid = ?, owner_started = ? WHERE uid = ? AND run_id = ?",
                (peer.pid, started, peer.uid, run["run"]),
            )
        found = self._entry(db, peer.uid, run["run"])
        assert found is not None
        return found

    def _entry(self, db: sqlite3.Connection, uid: int, run_id: str) -> rules.Entry | None:
        row = db.execute("SELECT * FROM entries WHERE uid = ? AND run_id = ?", (uid, run_id)).fetchone()
        return None if row is None else _entry_of(row)

    def _owner_for_change(self, db: sqlite3.Connection, peer: Peer, run_id: str, what: str) -> int:
        """The uid whose run ``run_id`` is, when ``peer`` may change it (its own, or an admin);
        else a refusal naming the owner."""
        if self._entry(db, peer.uid, run_id) is not None:
            return peer.uid
        rows = db.execute("SELECT uid FROM entries WHERE run_id = ? AND state != 'ended'", (run_id,)).fetchall()
        if not rows:
            raise Refused(f"no run {run_id} in the box's book", "unknown")
        owner: int = rows[0]["uid"]
        if self.policy().is_admin(peer.uid, peer.user):
            return owner
        raise Refused(f"run {run_id} is {user_name(owner)}'s: only {user_name(owner)} can {what}", "owner")

    def _sweep(self, db: sqlite3.Connection) -> None:
        """Runs whose owner process is gone hold no place and no GPU."""
        now = time.time()
        for row in db.execute(
            "SELECT uid, run_id, owner_pid, owner_started FROM entries WHERE state != 'ended'"
        ).fetchall():
            if process_alive(row["owner_pid"], row["owner_started"]):
                continue
            db.execute(
                f"UPDATE leases SET ended = ? WHERE uid = ? AND run_id = ? AND {LIVE}", (now, row["uid"], row["run_id"])
            )
            db.execute(
                "UPDATE entries SET state = 'ended', ended = ? WHERE uid = ? AND run_id = ?",
                (now, row["uid"], row["run_id"]),
            )
            db.execute(
                "INSERT INTO changes (at, uid, pid, action, owner_uid, run_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    now,
                    KEEPER_UID,
                    None,
                    "sweep",
                    row["uid"],
                    row["run_id"],
                    f"its owner, pid {row['owner_pid']}, is gone",
                ),
            )

    def _live_entries(self, db: sqlite3.Connection, check_owners: bool = False) -> dict[tuple[int, str], rules.Entry]:
        """Entries not ended; ``check_owners``: only those whose owner lives (a read sweeps
        nothing: it leaves the dead out; a write swept them first)."""
        rows = db.execute("SELECT * FROM entries WHERE state != 'ended'").fetchall()
        return {
            (r["uid"], r["run_id"]): _entry_of(r)
            for r in rows
            if not check_owners or process_alive(r["owner_pid"], r["owner_started"])
        }

    def _held(self, db: sqlite3.Connection) -> list[rules.HeldGpu]:
        return [
            rules.HeldGpu(r["uuid"], r["gpu_index"], r["uid"], r["run_id"], bool(r["shared"]))
            for r in db.execute(f"SELECT * FROM leases WHERE {LIVE}")
        ]

    def _leases_of(self, db: sqlite3.Connection, uid: int, run_id: str) -> list[dict]:
        return [
            {"uuid": r["uuid"], "index": r["gpu_index"], "since": r["since"], "shared": bool(r["shared"])}
            for r in db.execute(
                f"SELECT * FROM leases WHERE uid = ? AND run_id = ? AND {LIVE} ORDER BY gpu_index", (uid, run_id)
            )
        ]

    def _usage(self, db: sqlite3.Connection) -> rules.Usage:
        now = time.time()
        window = now - self.policy().fair_share_hours * 3600.0
        usage = rules.Usage()
        for row in db.execute(
            "SELECT uid, SUM(MIN(COALESCE(ended, ?), ?) - MAX(since, ?)) FROM leases WHERE COALESCE(ended, ?) > ? "
            "GROUP BY uid",
            (now, now, window, now, window),
        ):
            usage.recent_s[row[0]] = row[1] or 0.0
        for row in db.execute(f"SELECT uid, COUNT(*) FROM leases WHERE {LIVE} GROUP BY uid"):
            usage.held[row[0]] = row[1]
        return usage

    def _turn_reply(self, db: sqlite3.Connection, entry: rules.Entry | None) -> dict:
        assert entry is not None
        if entry.state == "holding":
            return {"position": None, "head": False, "reason": None, "holding": True}
        usage = self._usage(db)
        turns = rules.order(self._live_entries(db).values(), usage, self.policy().cap())
        turn = next((t for t in turns if (t.entry.uid, t.entry.run_id) == (entry.uid, entry.run_id)), None)
        if turn is None:
            return {"position": None, "head": False, "reason": "its owner is gone", "holding": False}
        reason = turn.blocked
        if reason == "runs ahead of it start first":
            head = next(t for t in turns if t.blocked is None)
            reason = self._why_behind(entry, head, usage)
        return {"position": turn.position, "head": turn.blocked is None, "reason": reason, "holding": False}

    def _why_behind(self, entry: rules.Entry, head: rules.Turn, usage: rules.Usage) -> str:
        """Which rule put the head of the queue ahead of this run: its user's own order, a
        user allowed to jump the queue, its preemption, or fair share (with both users' recent
        GPU-hours)."""
        ahead = f"{head.entry.user}'s {head.entry.kind} (position {head.position}) starts first"
        if head.entry.uid == entry.uid:
            return f"{ahead}: your own runs go by --priority, then by when they were queued"
        if head.entry.jumped is not None:
            return f"{ahead}: moved ahead of the queue (may_jump_queue)"
        if entry.preempt_asked is not None:
            return f"{ahead}: this run was preempted for the runs waiting then, and starts after them"
        hours = {uid: usage.recent_s.get(uid, 0.0) / 3600 for uid in (head.entry.uid, entry.uid)}
        window = self.policy().fair_share_hours
        return (
            f"{ahead}: fair share, {head.entry.user} used {hours[head.entry.uid]:.2f} GPU-hours in the last "
            f"{window:g} h, {entry.user} {hours[entry.uid]:.2f}"
        )

    def _why_no_gpus(
        self, db: sqlite3.Connection, entry: rules.Entry, slots: list[tuple[str, int]], held: list[rules.HeldGpu]
    ) -> tuple[str, str | None]:
        """Who holds the GPUs the head waits for, and, past the policy's limit, whose
        preemptible runs were asked to yield them."""
        taken = [h for h in held if not (entry.share and h.shared)]
        parts = []
        for index in sorted({h.index for h in taken}):
            on = [h for h in taken if h.index == index]
            parts.append(f"GPU {index} leased by {self._describe(db, on)}")
        line = "; ".join(parts) or "too few of the box's GPUs are usable"
        limit = self.policy().preempt_after_s
        if limit is None or time.time() - entry.queued < limit:
            return line, None
        free = len(rules.available(slots, held, entry.share))
        holding = [e for e in self._live_entries(db).values() if e.state == "holding"]
        chosen = rules.victims(entry, holding, held, free)
        now = time.time()
        for victim in chosen:
            db.execute(
                "UPDATE entries SET preempt_asked = ? WHERE uid = ? AND run_id = ?", (now, victim.uid, victim.run_id)
            )
            change(
                db,
                None,
                "preempt",
                victim.uid,
                victim.run_id,
                f"asked to yield for {entry.user}'s {entry.kind} {entry.run_id}, waiting "
                f"{(now - entry.queued) / 60:.0f} min (preempt_after_minutes)",
            )
        yielding = [e for e in holding if e.preempt_asked is not None or e in chosen]
        if yielding:
            who = ", ".join(f"{e.user}'s {e.kind}" for e in yielding)
            return line, f"preempting {who} (preemptible; waited past preempt_after_minutes)"
        return line, None

    def _describe(self, db: sqlite3.Connection, leases: list[rules.HeldGpu]) -> str:
        now = time.time()
        alive = self._live_entries(db)
        parts = []
        for lease in leases:
            entry = alive.get((lease.uid, lease.run_id))
            kind = entry.kind if entry else "run"
            since = entry.started if entry and entry.started else now
            parts.append(f"{user_name(lease.uid)} ({kind}, {span(now - since)})")
        return ", ".join(parts)

    def _free_line(self, db: sqlite3.Connection) -> str:
        leased = sorted({h.index for h in self._held(db)})
        return f"GPUs leased now: {', '.join(map(str, leased))}" if leased else "no GPU is leased"


def _entry_of(row: sqlite3.Row) -> rules.Entry:
    return rules.Entry(
        uid=row["uid"],
        run_id=row["run_id"],
        kind=row["kind"],
        gpus=row["gpus"],
        priority=row["priority"],
        share=bool(row["share"]),
        preemptible=bool(row["preemptible"]),
        queued=row["queued"],
        jumped=row["jumped"],
        state=row["state"],
        started=row["started"],
        preempt_asked=row["preempt_asked"],
    )


def _turn_record(turn: rules.Turn, peer: Peer) -> dict:
    entry = turn.entry
    return {
        "position": turn.position,
        "user": entry.user,
        "uid": entry.uid,
        "run_id": entry.run_id,
        "kind": entry.kind,
        "gpus": entry.gpus,
        "priority": entry.priority,
        "queued": entry.queued,
        "waiting_reason": turn.blocked,
        "mine": entry.uid == peer.uid,
    }
