"""A ranks pool as a placement of the run lifecycle: ``%%train --nproc N`` on a pool of N.

The training is a run of its own (kind ``ddp``), owned by the kernel through the one lifecycle
as on a fresh torchrun, but its ranks are the pool's: ``start`` sends the ``%%train`` cell to
every rank (which trains on the objects it holds, no export and no replay), the handle's
``poll`` reads the ranks' replies (their output goes to the run's log, ``[rankN]:`` prefixed as
torchrun writes it, so the cell's rank output and ``jiyu logs`` show it), and ``stop`` interrupts
the ranks, which stop at the next step with a checkpoint. The pool holds the GPUs: the training
takes its place at once. Each rank's record (pid, end, error) goes to the run's folder, so the
stall watch, stack dumps and the final-status rule read it as they read a fresh launch's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...core.runs.files import RunFiles
from ..gpu_queue import Grant
from ..launch_spec import LaunchSpec
from ..process import rank_records
from ..process.process_tree import StopResult
from .channel import Message
from .pool import RELEASE_S, RanksPool, Request

EXIT_FAILED, EXIT_LOST = 1, -9


@dataclass
class PoolPlacement:
    pool: RanksPool
    cell: str  # the %%train cell (or %train line) every rank runs
    notebook: str | None = None
    backend: str = "local"
    scheduled: bool = False

    def reserve(self, run_id: str) -> Grant:
        return Grant()  # the pool leased its GPUs when it started

    def wait_hint(self, run_id: str) -> tuple[float, str]:
        return 0.0, "on the ranks pool"

    def start(
        self,
        run_id: str,
        script: os.PathLike,
        spec: LaunchSpec,
        *,
        cwd: str | None,
        env: object = None,
        grant: Grant | None = None,
    ) -> PoolTraining:
        return PoolTraining.start(self.pool, run_id, self.cell, self.notebook)


@dataclass
class PoolTraining:
    """The ranks of a pool training one run, as the lifecycle follows them."""

    pool: RanksPool
    run_id: str
    request: Request
    records: dict[int, rank_records.RankRecord]
    log: Path
    stop_result: StopResult | None = None
    tracebacks: dict[int, list[str]] = field(default_factory=dict)
    code: int | None = None

    @classmethod
    def start(cls, pool: RanksPool, run_id: str, cell: str, notebook: str | None) -> PoolTraining:
        now, nodes = time.time(), pool.options.get("nodes", 1)
        records = {
            info.rank: rank_records.RankRecord(
                rank=info.rank,
                local_rank=info.rank % (pool.nproc // nodes),
                pid=info.pid,
                started=now,
                host=info.host,
                nnodes=nodes,
            )
            for info in pool.ranks
        }
        for record in records.values():
            rank_records.write(run_id, record)
        training = cls(pool, run_id, None, records, RunFiles.of(run_id).log)  # type: ignore[arg-type]
        training.request = pool.begin(
            "execute", {"code": cell, "train": {"run_id": run_id, "notebook": notebook}}, on_message=training._take
        )
        return training

    @property
    def pid(self) -> int | None:
        return self.pool.lifecycle.handle.pid if self.pool.lifecycle.handle is not None else None

    @property
    def pgid(self) -> int | None:
        return None  # never signal the pool's group: the pool outlives its trainings

    def _take(self, message: Message) -> None:
        rank = message.get("rank")
        if message.kind == "stream":
            with open(self.log, "a", encoding="utf-8") as out:
                out.write("".join(f"[rank{rank}]: {line}\n" for line in message["text"].splitlines()))
        elif message.kind == "error":
            self.tracebacks[rank] = list(message["traceback"])
        elif message.kind == "done":
            record = self.records[rank]
            record.ended, record.stopped = time.time(), False
            record.exit_code = 0 if message["status"] == "ok" else EXIT_FAILED
            record.error = message.get("error") if message["status"] == "error" else None
            if message["status"] == "interrupted":
                record.error = "interrupted"
            rank_records.write(self.run_id, record)

    def poll(self) -> int | None:
        if self.code is None and self.request.pump(0):
            self.code = self._exit_code()
        return self.code

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the ranks of run {self.run_id} are still training")
            self.request.pump()
        assert self.code is not None
        return self.code

    def _exit_code(self) -> int:
        statuses = self.request.statuses.values()
        if "lost" in statuses or self.request.stuck:
            return EXIT_LOST
        return 0 if all(status == "ok" for status in statuses) else EXIT_FAILED

    def stop(self, grace: float = 10.0) -> StopResult:
        """Interrupts the ranks (``fit`` stops at the next step the ranks agree on, with a
        checkpoint); again after ``grace``; ranks still busy then are stuck where no signal
        reaches them, and the pool is ended (its owner starts another)."""
        self.request.interrupt()
        deadline = time.monotonic() + grace
        while self.poll() is None and time.monotonic() < deadline:
            self.request.pump()
        if self.poll() is None:
            self.pool.interrupt(self.request.pending)
            deadline = time.monotonic() + RELEASE_S
            while self.poll() is None and time.monotonic() < deadline:
                self.request.pump()
        stuck = self.request.pending if self.poll() is None else []
        if stuck:
            self.pool.kill(f"rank {', '.join(map(str, stuck))} did not stop training (stuck in a collective)")
            self.request.stuck = stuck
            self.code = EXIT_LOST
        self.stop_result = StopResult(found=len(self.records), remaining=stuck)
        return self.stop_result

    def ranks(self) -> list[rank_records.RankRecord]:
        return rank_records.read_all(self.run_id)

    def error_line(self) -> str | None:
        if self.code in (None, 0):
            return None
        if self.request.stuck:
            return f"rank {', '.join(map(str, self.request.stuck))} stuck; the ranks pool was ended"
        if "lost" in self.request.statuses.values():
            return "a rank of the ranks pool died; the pool ended"
        failed = rank_records.first_failure(self.ranks())
        return failed.describe() if failed is not None else None
