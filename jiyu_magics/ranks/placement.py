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

from ..core.runs.files import RunFiles
from ..jobs.gpu_queue import Grant
from ..jobs.launch_spec import LaunchSpec
from ..jobs.process import rank_records
from ..jobs.process.process_tree import StopResult
from .agent import PoolAgent
from .protocol import Kind, Message, Status
from .requests import Request

EXIT_FAILED, EXIT_LOST = 1, -9
PULL_HINT = " (the trained model stays in the ranks: %ranks pull model --from 0)"


@dataclass
class PoolPlacement:
    agent: PoolAgent
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
        return PoolTraining.start(self.agent, run_id, self.cell, self.notebook)


@dataclass
class PoolTraining:
    """The ranks of a pool training one run, as the lifecycle follows them."""

    agent: PoolAgent
    run_id: str
    request: Request
    records: dict[int, rank_records.RankRecord]
    log: Path
    stop_result: StopResult | None = None
    tracebacks: dict[int, list[str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)  # rank -> "ValueError: ..."
    code: int | None = None
    grace: float | None = None  # a stop's: the time fit gets to reach a step and checkpoint

    @classmethod
    def start(cls, agent: PoolAgent, run_id: str, cell: str, notebook: str | None) -> PoolTraining:
        pool, nodes = agent.pool, agent.pool.options.get("nodes", 1)
        agent.heal()
        records = {
            state.rank: rank_records.RankRecord(
                rank=state.rank,
                local_rank=state.rank % (pool.nproc // nodes),
                pid=state.hello.pid,
                started=state.hello.started,  # the process's start: with the pid, who it is
                host=state.hello.host,
                nnodes=nodes,
            )
            for state in pool.ranks.values()
            if state.hello is not None
        }
        for record in records.values():
            rank_records.write(run_id, record)
        training = cls(agent, run_id, None, records, RunFiles.of(run_id).log)  # type: ignore[arg-type]
        fields = {"code": cell, "train": {"run_id": run_id, "notebook": notebook}}
        training.request = pool.begin(Kind.EXECUTE, fields, agent.targets(None), on_message=training._take)
        return training

    @property
    def pid(self) -> int | None:
        handle = self.agent.pool.lifecycle.handle
        return handle.pid if handle is not None else None

    @property
    def pgid(self) -> int | None:
        return None  # never signal the pool's group: the pool outlives its trainings

    def _take(self, message: Message) -> None:
        rank = message.get("rank")
        if message.kind is Kind.STREAM:
            with open(self.log, "a", encoding="utf-8") as out:
                out.write("".join(f"[rank{rank}]: {line}\n" for line in message["text"].splitlines()))
        elif message.kind is Kind.ERROR:
            self.tracebacks[rank] = list(message["traceback"])
            self.errors[rank] = f"{message['ename']}: {message['evalue']}".rstrip(": ")
        elif message.kind is Kind.DONE:
            record = self.records[rank]
            status = Status(message["status"])
            record.ended, record.stopped = time.time(), False
            record.exit_code = 0 if status is Status.OK else EXIT_FAILED
            record.error = None
            if status is Status.ERROR:
                record.error = self.errors.get(rank) or message.get("refusal") or "error"
            elif status is not Status.OK:
                record.error = status.value
            rank_records.write(self.run_id, record)

    def poll(self) -> int | None:
        if self.code is None:
            self.agent.pool.pump(0)
            self.agent.police(self.request, self.grace)
            if self.request.finished:
                self._finish()
        return self.code

    def _finish(self) -> None:
        self.agent.pool.done(self.request)
        self.code = self._exit_code()
        try:
            self.agent.settle(self.request)  # the process group whole again before the next cell
        except Exception as problem:  # noqa: BLE001 - the training's end stands; the pool says why later
            self.agent.broken = self.agent.broken or str(problem)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the ranks of run {self.run_id} are still training")
            self.agent.pool.pump()
        assert self.code is not None
        return self.code

    def _exit_code(self) -> int:
        if self.request.deaths or self.request.killed:
            return EXIT_LOST
        return 0 if self.request.ok else EXIT_FAILED

    def stop(self, grace: float = 10.0) -> StopResult:
        """Interrupts the ranks: ``fit`` stops at the next step the ranks agree on, with a
        checkpoint, given ``grace`` seconds; a rank blocked in a collective then has it aborted,
        one stuck beyond that is ended (the others keep their state)."""
        self.grace = grace
        self.agent.interrupt(self.request)
        while self.poll() is None:
            self.agent.pool.pump()
        killed = [self.records[rank].pid for rank in self.request.killed if rank in self.records]
        self.stop_result = StopResult(found=len(self.records), killed=killed)
        return self.stop_result

    def ranks(self) -> list[rank_records.RankRecord]:
        return rank_records.read_all(self.run_id)

    def error_line(self) -> str | None:
        if self.code in (None, 0):
            return None
        if self.request.killed:
            return f"rank {', '.join(map(str, self.request.killed))} stuck; it was ended (the others keep their state)"
        if self.request.deaths:
            from .reports import death_line

            return "; ".join(death_line(death) for death in self.request.deaths.values())
        failed = rank_records.first_failure(self.ranks())
        return failed.describe() if failed is not None else None
