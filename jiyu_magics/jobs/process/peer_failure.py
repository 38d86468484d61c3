"""A rank stuck after a peer failed ends itself instead of waiting for torchrun's SIGKILL.

When a rank fails, torchrun sends SIGTERM to the others and SIGKILLs them 30 s later. A rank
blocked in C++ (``init_process_group`` waiting for the rank that failed before joining, a
collective whose peer is gone) never runs its Python SIGTERM handler, so the cell or job
reported the failure only after those 30 s. Only the rank itself can tell "stuck" from "busy
stopping": its handler notes the stop (``core.job_stop``) as soon as the main thread runs
Python again, and a rank writing its stop checkpoint has noted it. So a watch thread here
ends the rank when a peer of the same attempt has recorded an error and ``STUCK_S`` later
this rank still has not taken the stop. Its record says so and is written after the peer's,
so the peer stays the failure named. The thread needs the GIL, which torch releases while it
waits in the rendezvous store and in gloo/NCCL collectives.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ...core.processes import job_stop
from . import rank_records as ranks

WATCH_S = 1.0
STUCK_S = 10.0  # after a peer's error; a main thread in Python takes SIGTERM within a step


def watch(run_id: str, record: ranks.RankRecord) -> None:
    """Starts the watch for this rank (a daemon thread that wakes once a second)."""
    threading.Thread(target=_watch, args=(run_id, record), name="jiyu-peer-watch", daemon=True).start()


def _watch(run_id: str, record: ranks.RankRecord) -> None:
    failed_since = None
    while True:
        time.sleep(WATCH_S)
        if job_stop.noted() is not None or record.ended is not None:  # it took the stop, or its own end stands
            return
        peer = failed_peer(ranks.read_all(run_id), record)
        if peer is None:
            continue
        failed_since = failed_since or time.monotonic()
        if time.monotonic() - failed_since >= STUCK_S:
            _end_stuck(run_id, record, peer)


def failed_peer(records: list[ranks.RankRecord], me: ranks.RankRecord) -> ranks.RankRecord | None:
    """Another rank of this attempt that ended with an error it recorded (a stop exits 0)."""
    return next((r for r in records if r.rank != me.rank and r.restart == me.restart and r.exited_with_error), None)


def _end_stuck(run_id: str, record: ranks.RankRecord, peer: ranks.RankRecord) -> None:
    error = (
        f"ended {STUCK_S:.0f} s after rank {peer.rank} failed: it was stuck (waiting for that rank in "
        "the rendezvous or a collective) and could not take the stop"
    )
    record.ended, record.exit_code, record.error = time.time(), 1, error
    ranks.write(run_id, record)
    print(f"[jiyu] rank {record.rank} {error}", file=sys.stderr, flush=True)
    os._exit(1)  # the main thread is blocked in C++: nothing else can end this process
