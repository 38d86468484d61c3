"""GPU time and idle GPU time: what each run and notebook held, and how much of it sat idle.

GPU-seconds of a run are its lease time × GPUs, exact from the lease table. Idle GPU-seconds
(utilisation under 5% while leased, or while a kernel holds memory on an unleased GPU) are
sampled by whoever already reads NVML: the Jupyter server's snapshot thread for every GPU, a
job's supervisor for its own GPUs, never the training loop. Each sample credits the time since
that GPU's previous sample (at most ``MAX_GAP_S``: nobody watched longer than that) to the
GPU's holders, in hourly rows; the last-sampled time per GPU is kept in the store, so two
samplers never count the same seconds twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..box.client import BoxClient
from ..box.identity import user_name
from ..box.location import find
from ..store.database import StoreDatabase
from .snapshot import GpuDevice, GpuSnapshot

IDLE_UTIL = 5  # % utilisation below which a held GPU counts as idle
MAX_GAP_S = 60.0  # the most one sample credits
HOUR = 3600.0
BY = ("run", "notebook", "day", "user")


def accrue(db: StoreDatabase, snap: GpuSnapshot, only: Iterable[str] | None = None, now: float | None = None) -> None:
    """Credits the time since each GPU's last sample to its holders (``only``: these UUIDs)."""
    wanted = None if only is None else set(only)
    devices = [d for d in snap.devices if d.uuid and (wanted is None or d.uuid in wanted)]
    if not devices:
        return
    with db.write() as conn:
        now = time.time() if now is None else now
        last = dict(conn.execute("SELECT uuid, at FROM gpu_sampled").fetchall())
        conn.executemany(
            "INSERT OR REPLACE INTO gpu_sampled (uuid, at) VALUES (?, ?)", [(d.uuid, now) for d in devices]
        )
        for device in devices:
            span = min(now - last[device.uuid], MAX_GAP_S) if device.uuid in last else 0.0
            if span > 0:
                _credit(conn, device, span, now)


def _credit(conn, device: GpuDevice, span: float, now: float) -> None:
    idle = span if device.gpu_util is not None and device.gpu_util < IDLE_UTIL else 0.0
    hour = now - now % HOUR
    for owner, run_id, notebook in holders(device):
        conn.execute(
            "INSERT INTO gpu_usage (hour, uuid, owner, run_id, notebook, held_s, idle_s) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hour, uuid, owner) DO UPDATE SET "
            "held_s = held_s + excluded.held_s, idle_s = idle_s + excluded.idle_s",
            (hour, device.uuid, owner, run_id, notebook, span, idle),
        )


def holders(device: GpuDevice) -> list[tuple[str, str | None, str | None]]:
    """Who a sample is credited to: the runs leasing the GPU, else each kernel holding memory
    on it (a notebook that keeps a GPU after its training ended)."""
    if device.leases:
        return [(f"run:{lease['run_id']}", lease["run_id"], lease.get("notebook")) for lease in device.leases]
    kernels = {}
    for proc in device.processes:
        owner: Mapping[str, Any] = proc.owner or {}
        if owner.get("kernel_id") and (proc.used_memory or 0) > 0:
            kernels[owner["kernel_id"]] = owner.get("notebook")
    return [(f"kernel:{kid}", None, notebook) for kid, notebook in kernels.items()]


@dataclass
class UsageRow:
    key: str  # run id, notebook path or day
    label: str
    gpu_s: float = 0.0
    idle_s: float = 0.0
    runs: int = 0

    def to_dict(self) -> dict:
        return {**asdict(self), "gpu_hours": self.gpu_s / HOUR, "idle_gpu_hours": self.idle_s / HOUR}


def report(db: StoreDatabase, since: float, by: str = "run", now: float | None = None) -> list[UsageRow]:
    """GPU and idle GPU time since ``since``, grouped ``by`` run, notebook, (local) day or user."""
    if by not in BY:
        raise ValueError(f"--by {by!r}: expected one of {', '.join(BY)}")
    if by == "user":
        return by_user(db, since, now)
    now = time.time() if now is None else now
    rows: dict[str, UsageRow] = {}
    with db.read() as conn:
        for lease in conn.execute(
            "SELECT l.run_id, l.since, l.ended, r.name, r.kind, r.notebook FROM gpu_leases l "
            "LEFT JOIN runs r ON r.id = l.run_id WHERE COALESCE(l.ended, ?) > ?",
            (now, since),
        ):
            start, end = max(lease["since"], since), lease["ended"] or now
            for key, label, seconds in _split(by, lease, start, end):
                _row(rows, key, label).gpu_s += seconds
        for sample in conn.execute(
            "SELECT u.*, r.name, r.kind FROM gpu_usage u LEFT JOIN runs r ON r.id = u.run_id WHERE u.hour + ? > ?",
            (HOUR, since),
        ):
            key, label = _key(by, sample, sample["hour"])
            row = _row(rows, key, label)
            row.idle_s += sample["idle_s"]
            if sample["run_id"] is None:  # a kernel's hold: no lease counted it
                row.gpu_s += sample["held_s"]
    _count_runs(rows, by, db, since, now)
    return (
        sorted(rows.values(), key=lambda r: (-r.gpu_s, r.key))
        if by != "day"
        else sorted(rows.values(), key=lambda r: r.key)
    )


def by_user(db: StoreDatabase, since: float, now: float | None = None) -> list[UsageRow]:
    """GPU time per Unix user: every user's from a box's book (its lease history: GPU time
    only, idle time is each user's own to see), else this home's own, as its user's."""
    location = find()
    if location is None:
        mine = report(db, since, "run", now)
        name = user_name(os.getuid())
        row = UsageRow(name, name, sum(r.gpu_s for r in mine), sum(r.idle_s for r in mine), sum(r.runs for r in mine))
        return [row] if row.gpu_s or row.runs else []
    users = BoxClient(location).call("usage", since=float(since))["users"]
    rows = [UsageRow(u["user"], u["user"], u["gpu_s"] or 0.0, 0.0, u["runs"]) for u in users]
    return sorted(rows, key=lambda r: (-r.gpu_s, r.key))


def _split(by: str, lease, start: float, end: float) -> list[tuple[str, str, float]]:
    if by != "day":
        return [(*_key(by, lease, start), end - start)]
    parts = []
    while start < end:
        day = datetime.fromtimestamp(start).replace(hour=0, minute=0, second=0, microsecond=0)
        next_day = day.timestamp() + 86400.0
        stop = min(end, next_day)
        parts.append((day.strftime("%Y-%m-%d"), day.strftime("%Y-%m-%d"), stop - start))
        start = stop
    return parts


def _key(by: str, row, when: float) -> tuple[str, str]:
    if by == "day":
        day = datetime.fromtimestamp(when).strftime("%Y-%m-%d")
        return day, day
    if by == "notebook":
        return row["notebook"] or "", row["notebook"] or "(no notebook)"
    if row["run_id"] is not None:
        return row["run_id"], f"{row['name'] or row['run_id']} ({row['run_id']}, {row['kind'] or 'run'})"
    owner = row["owner"]
    return owner, f"kernel {owner.split(':', 1)[1][:8]}" + (f" · {row['notebook']}" if row["notebook"] else "")


def _row(rows: dict[str, UsageRow], key: str, label: str) -> UsageRow:
    if key not in rows:
        rows[key] = UsageRow(key, label)
    return rows[key]


def _count_runs(rows: dict[str, UsageRow], by: str, db: StoreDatabase, since: float, now: float) -> None:
    with db.read() as conn:
        found = conn.execute(
            "SELECT DISTINCT l.run_id, l.since, r.notebook FROM gpu_leases l LEFT JOIN runs r "
            "ON r.id = l.run_id WHERE COALESCE(l.ended, ?) > ?",
            (now, since),
        ).fetchall()
    seen: dict[str, set] = {}
    for lease in found:
        key = {
            "run": lease["run_id"],
            "notebook": lease["notebook"] or "",
            "day": datetime.fromtimestamp(max(lease["since"], since)).strftime("%Y-%m-%d"),
        }[by]
        seen.setdefault(key, set()).add(lease["run_id"])
    for key, row in rows.items():
        row.runs = len(seen.get(key, ()))
