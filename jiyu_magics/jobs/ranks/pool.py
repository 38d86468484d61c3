"""A ranks pool, from its kernel's side: torchrun workers kept across cells, as a run.

``RanksPool.start`` registers a run of kind ``ranks`` and drives it through the one run
lifecycle (``jobs.lifecycle``) like any run: it waits in the GPU queue with a position, starts
torchrun as the kernel's child process group on its leased GPUs (each rank runs
``magics.ranks_worker``), and is stopped, followed for a stored stop request and recorded at its
end the same way. The kernel binds the pool's channel (``channel``) before torchrun starts and
waits for every rank's hello while torchrun lives: a readiness handshake, no fixed timeout.

A request (run a cell, push objects, pull one) goes to some ranks and ends when each of them
said ``done``; ``Request.pump`` reads what they send meanwhile (output, displays, errors,
values) and hands it to the caller's ``on_message``. When a rank fails, the ranks still busy
are interrupted (SIGINT: a ``KeyboardInterrupt`` in their cell, or a stop at a step in
``fit``) so none waits forever in a collective its peer will never join; one that does not
come back within ``RELEASE_S`` is stuck in C++, where no signal reaches Python, and the pool is
restarted. A rank that died ends the pool's run ``failed``; its owner starts a fresh one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.runs.model import RunKind
from ...core.store.database import StoreUnusable
from .. import scheduler_follower
from ..backends import placement_for
from ..job_error import JobError
from ..launch_spec import visible_gpus
from ..lifecycle import RunLifecycle
from ..submit_options import SubmitOptions
from .allocation import channel_on_allocation
from .channel import ADDRESS_ENV, KernelEnd, Message

POOL_SCRIPT = "ranks.py"
ADDRESS_FILE = "pool.json"
RELEASE_S = 5.0  # how long ranks still busy get to come back once a peer failed or was interrupted
PUMP_S = 0.2  # the longest a pump waits for a message before it looks at the ranks' processes
SHUTDOWN_S = 10.0
ALLOCATION_SHUTDOWN_S = 60.0  # on an allocation: each node's torchrun, then srun, then the batch script end
WORKER_SOURCE = "from jiyu_magics.magics.ranks_worker import serve\n\nserve()\n"


@dataclass(frozen=True)
class RankInfo:
    rank: int
    pid: int
    host: str
    device: str
    backend: str


@dataclass
class Request:
    """One request to some ranks, as its replies come in."""

    pool: RanksPool
    id: str
    ranks: tuple[int, ...]
    on_message: Callable[[Message], None] | None = None
    statuses: dict[int, str] = field(default_factory=dict)  # rank -> ok | error | interrupted | lost
    errors: dict[int, Message] = field(default_factory=dict)  # rank -> its error (ename, evalue, traceback)
    values: dict[int, Message] = field(default_factory=dict)  # rank -> a pulled value
    refusals: dict[int, str] = field(default_factory=dict)  # rank -> why it could not do what was asked
    first_done: float | None = None
    released: float | None = None  # when the ranks still busy were interrupted
    stuck: list[int] = field(default_factory=list)  # ranks that never came back after the release

    @property
    def pending(self) -> list[int]:
        return [rank for rank in self.ranks if rank not in self.statuses]

    @property
    def finished(self) -> bool:
        return not self.pending or bool(self.stuck)

    @property
    def ok(self) -> bool:
        return not self.stuck and all(self.statuses.get(rank) == "ok" for rank in self.ranks)

    def pump(self, timeout: float = PUMP_S) -> bool:
        """Reads what came within ``timeout`` seconds; True once every rank is done (or the
        pool cannot finish it: a rank died, or one is stuck after a peer's failure)."""
        if self.finished:
            return True
        with self.pool.lock:  # one thread at a time on the sockets (a stop's thread pumps too)
            if self.pool.ended:
                return True
            message = self.pool.end.receive(timeout)
            while message is not None:
                self._take(message)
                message = self.pool.end.receive(0)
        if not self.pool.alive():
            for rank in self.pending:
                self.statuses[rank] = "lost"
            return True
        self._release_when_a_peer_failed()
        return self.finished

    def _take(self, message: Message) -> None:
        if message.get("request") != self.id:
            return  # late output of a request that already ended
        rank = message.get("rank")
        if message.kind == "done":
            self.statuses[rank] = message["status"]
            self.first_done = self.first_done or time.monotonic()
            if message.get("error") and rank not in self.errors:
                self.refusals[rank] = message["error"]
        elif message.kind == "error":
            self.errors.setdefault(rank, message)
        elif message.kind == "value":
            self.values[rank] = message
        if self.on_message is not None:
            self.on_message(message)

    def _release_when_a_peer_failed(self) -> None:
        """Once a rank failed (or the kernel was interrupted), the ranks still busy are
        interrupted; those that have not come back ``RELEASE_S`` later are stuck."""
        if not self.pending:
            return
        if self.released is None and any(status != "ok" for status in self.statuses.values()):
            self.released = time.monotonic()
            self.pool.interrupt(self.pending)
        elif self.released is not None and time.monotonic() - self.released >= RELEASE_S:
            self.stuck = self.pending

    def interrupt(self) -> None:
        """The kernel was interrupted: so are the ranks still busy (once; a second interrupt
        while they do not come back is the caller's to escalate)."""
        if self.released is None:
            self.released = time.monotonic()
        self.pool.interrupt(self.pending)

    def first_failure(self) -> tuple[int, Message] | None:
        """The rank that failed first, with its error: a rank's own error before the
        interruptions its failure caused in the others."""
        own = [(rank, error) for rank, error in self.errors.items() if error["ename"] != "KeyboardInterrupt"]
        return min(own or list(self.errors.items()), key=lambda item: item[0], default=None)


class RanksPool:
    def __init__(self, lifecycle: RunLifecycle, end: KernelEnd | None, nproc: int, options: dict):
        """``end`` is None until an allocation's nodes are known (``allocation``)."""
        self.lifecycle, self._end, self.nproc, self.options = lifecycle, end, nproc, options
        self.ranks: list[RankInfo] = []
        self.lock = threading.RLock()  # the lifecycle is followed by the kernel's thread and the watch
        self.ended = False
        self.started = time.time()

    @property
    def end(self) -> KernelEnd:
        assert self._end is not None, "the pool's channel is made before any request"
        return self._end

    @end.setter
    def end(self, end: KernelEnd | None) -> None:
        self._end = end

    @property
    def run_id(self) -> str:
        return self.lifecycle.run_id

    @property
    def name(self) -> str:
        return self.lifecycle.store.stored(self.run_id).name

    # -- start -------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        nproc: int,
        *,
        device: str | None = None,
        gpus: int | None = None,
        name: str | None = None,
        notebook: str | None = None,
        on_wait: Callable[[str], None] | None = None,
        nodes: int = 1,
        backend: str = "local",
        slurm: dict | None = None,
    ) -> RanksPool:
        """A pool of ``nproc`` ranks (on each of ``nodes`` nodes), ready: every rank joined the
        process group and said hello. Waits queued while its GPUs are taken (``on_wait`` hears
        why). ``device="cpu"`` (or a machine without GPUs): gloo ranks that lease no GPU.
        ``backend="slurm"``: the ranks run on a Slurm allocation of ``nodes`` nodes (``slurm``:
        its ``SubmitOptions`` fields: partition, time, gpus_per_node...); the pool waits while
        Slurm holds the job pending."""
        on_cpu = bool(device and device.startswith("cpu"))
        scheduled = backend != "local"
        if scheduled and on_cpu:
            slurm = {**(slurm or {}), "gpus_per_node": 0}
        options = SubmitOptions(
            nproc=nproc,
            nnodes=nodes,
            gpus=None if scheduled else 0 if on_cpu else gpus,
            name=name,
            backend=backend,
            **(slurm or {}),
        ).validated()
        spec = options.launch_spec()
        placement = placement_for(backend) if scheduled else None
        if placement is None:
            spec = spec.with_gpus(visible_gpus())
        lifecycle = RunLifecycle.register(
            RunKind.RANKS,
            options.name or f"ranks-{nproc}" + (f"x{nodes}" if nodes > 1 else ""),
            spec,
            owner="kernel",
            notebook=notebook,
            placement=placement,
        )
        settings: dict[str, Any] = {
            "device": device,
            "gpus": gpus,
            "name": name,
            "notebook": notebook,
            "nodes": nodes,
            "backend": backend,
            "slurm": slurm,
        }
        pool = cls(lifecycle, None if scheduled else KernelEnd(), nproc * nodes, settings)
        try:
            with lifecycle:
                files = lifecycle.files
                if pool._end is not None:
                    pool.end.address.save(files.root / ADDRESS_FILE)
                files.script.with_name(POOL_SCRIPT).write_text(WORKER_SOURCE)
                if not lifecycle.start(
                    env={ADDRESS_ENV: str(files.root / ADDRESS_FILE)}, on_wait=on_wait, script=files.root / POOL_SCRIPT
                ):
                    lifecycle.end()
                    raise JobError(f"ranks pool {lifecycle.run_id} was stopped before it started")
                if pool._end is None:  # on an allocation: the channel once Slurm says where the ranks are
                    scheduler_follower.ensure_running()  # records the job's end should this kernel die
                    pool.end = channel_on_allocation(lifecycle, on_wait)
                    pool.end.address.save(files.root / ADDRESS_FILE)
                pool._await_hellos()
        except BaseException:
            if pool._end is not None:
                pool.end.close()
            raise
        return pool

    @property
    def remote(self) -> bool:
        """Whether the ranks run on other machines (a scheduler's allocation)."""
        return self.lifecycle.placement.scheduled

    def _await_hellos(self) -> None:
        hellos: dict[int, RankInfo] = {}
        while len(hellos) < self.nproc:
            message = self.end.receive(PUMP_S)
            if message is not None and message.kind == "hello":
                info = RankInfo(message["rank"], message["pid"], message["host"], message["device"], message["backend"])
                hellos[info.rank] = info
            elif message is None and not self.lifecycle.running():
                outcome = self.lifecycle.end()
                raise JobError(f"ranks pool {self.run_id} could not start: {outcome.error or 'its ranks exited'}")
        self.ranks = [hellos[rank] for rank in sorted(hellos)]

    # -- requests ----------------------------------------------------------------------------------
    def begin(
        self,
        kind: str,
        fields: dict | None = None,
        ranks: Iterable[int] | None = None,
        buffers: Sequence[bytes] = (),
        on_message: Callable[[Message], None] | None = None,
    ) -> Request:
        targets = tuple(sorted(set(range(self.nproc) if ranks is None else ranks)))
        bad = [rank for rank in targets if not 0 <= rank < self.nproc]
        if bad:
            raise JobError(f"rank {bad[0]} is not in this pool (ranks 0 to {self.nproc - 1})")
        request = Request(self, uuid.uuid4().hex[:12], targets, on_message)
        for rank in targets:
            self.end.send(rank, Message(kind, {"request": request.id, **(fields or {})}, list(buffers)))
        return request

    def interrupt(self, ranks: Iterable[int]) -> None:
        """SIGINT to these ranks' processes: on this machine (the pool's ranks are the kernel's
        grandchildren) the kernel sends it; on an allocation each rank's control thread does,
        told over the channel."""
        for rank in ranks:
            if self.remote:
                with self.lock:
                    self.end.interrupt(rank)
                continue
            try:
                os.kill(self.ranks[rank].pid, signal.SIGINT)
            except (ProcessLookupError, IndexError):
                continue

    # -- following ---------------------------------------------------------------------------------
    def alive(self) -> bool:
        """Whether every rank still runs (torchrun exits when one of them ends)."""
        with self.lock:
            return not self.ended and self.lifecycle.running()

    def describe(self) -> str:
        on_host = " on node {host}" if self.remote else ""
        where = ", ".join(f"rank {r.rank}: pid {r.pid}{on_host.format(host=r.host)} on {r.device}" for r in self.ranks)
        backend = self.ranks[0].backend if self.ranks else "?"
        allocation = ""
        if self.remote:
            run = self.lifecycle.store.stored(self.run_id)
            allocation = f", Slurm job {run.scheduler_id}, {self.options['nodes']} node(s)"
        return f"ranks pool {self.run_id} ({self.name}): {self.nproc} rank(s){allocation}, {backend}; {where}"

    # -- end ---------------------------------------------------------------------------------------
    def shutdown(self) -> str | None:
        """Asks every rank to end, waits for torchrun's exit (then stops what is left) and
        records the end; the end's line, or None when it was already over."""
        with self.lock:
            if self.ended:
                return None
            self.ended = True
            for rank in range(self.nproc):
                try:
                    self.end.send(rank, Message("shutdown"))
                except Exception:  # noqa: BLE001 - a rank that is gone has nothing to hear
                    continue
            handle = self.lifecycle.handle
            deadline = time.monotonic() + (ALLOCATION_SHUTDOWN_S if self.remote else SHUTDOWN_S)
            while handle is not None and handle.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5 if self.remote else 0.05)
            try:
                outcome = self.lifecycle.end()
            except StoreUnusable as problem:  # the ranks are gone all the same; the store cannot say so
                return f"ranks pool {self.run_id} ended; its end is not recorded: {problem}"
            finally:
                self.end.close()
            return f"ranks pool {self.run_id} {outcome.status}" + (f": {outcome.error}" if outcome.error else "")

    def kill(self, reason: str) -> None:
        """Ends the pool now (a rank stuck in a collective, a second interrupt): every process,
        the run ``failed`` with ``reason``."""
        with self.lock:
            if self.ended:
                return
            self.ended = True
            self.lifecycle.kill()
            self.lifecycle.end(error=reason)
            self.end.close()

    def record_death(self) -> str:
        """The run's end once a rank died (torchrun ended the others): its line."""
        with self.lock:
            self.ended = True
            outcome = self.lifecycle.end()
            self.end.close()
            return outcome.error or f"its ranks exited ({outcome.status})"
