"""A ranks pool, from its kernel's side: ranks kept across cells, as a run.

``RanksPool.start`` registers a run of kind ``ranks`` and drives it through the one run
lifecycle (``jobs.lifecycle``) like any run: it waits in the GPU queue with a position, starts
the ranks as the kernel's child process group on its leased GPUs, and is stopped, followed for a
stored stop request and recorded at its end the same way. On the kernel's machine the ranks are
forked by the pool's supervisor (``supervisor``), which keeps the others alive when one dies; on
a Slurm allocation torchrun starts them (``allocation``). The kernel binds the pool's channel
(``channel``) first and waits for every rank's hello while the ranks' launcher lives: a
readiness handshake, no fixed timeout.

This module is the mechanism: the ranks and their states, the process group's generation,
sending requests and taking what comes back (``pump``). What to do when a rank fails, hangs or
dies is the agent's (``agent``).
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.runs.launch_context import POOL_ADDRESS_ENV
from ..core.runs.model import RunKind
from ..core.store.database import StoreUnusable
from ..jobs import scheduler_follower
from ..jobs.backends import placement_for
from ..jobs.job_error import JobError
from ..jobs.launch_spec import visible_gpus
from ..jobs.lifecycle import RunLifecycle
from ..jobs.submit_options import SubmitOptions
from .allocation import channel_on_allocation
from .channel import KernelEnd
from .launch import SupervisedRanks
from .protocol import REQUESTS, Hello, Kind, Message, RankExit
from .requests import Request

POOL_SCRIPT = "ranks.py"  # what torchrun runs on an allocation's nodes
ADDRESS_FILE = "pool.json"
PUMP_S = 0.2  # the longest a pump waits for a message before it looks at the ranks' launcher
WATCH_S = 0.5  # how often an idle pool looks for a rank's exit and its launcher's
SHUTDOWN_S = 10.0
ALLOCATION_SHUTDOWN_S = 60.0  # on an allocation: each node's torchrun, then srun, then the batch script end
WORKER_SOURCE = "from jiyu_magics.ranks.worker import serve\n\nserve()\n"
FLIGHT_RECORDER = {"TORCH_FR_BUFFER_SIZE": "64", "TORCH_NCCL_TRACE_BUFFER_SIZE": "64"}  # each rank's last collectives


class RankState(str, enum.Enum):
    """A rank as its kernel knows it (not a run status: the pool's run goes on through these)."""

    READY = "ready"
    DEAD = "dead"  # its process ended; the others keep their state; ``%ranks restart`` replaces it
    JOINING = "joining"  # a replacement, started, not said hello yet


@dataclass
class PoolRank:
    rank: int
    state: RankState
    hello: Hello | None = None
    exit: RankExit | None = None
    sequence: int | None = None  # collectives its process group made in the current generation
    restarts: int = 0

    @property
    def pid(self) -> int | None:
        return self.hello.pid if self.hello else None


class RanksPool:
    def __init__(self, lifecycle: RunLifecycle, end: KernelEnd | None, nproc: int, options: dict):
        """``end`` is None until an allocation's nodes are known (``allocation``)."""
        self.lifecycle, self._end, self.nproc, self.options = lifecycle, end, nproc, options
        self.ranks = {rank: PoolRank(rank, RankState.JOINING) for rank in range(nproc)}
        self.generation = 0
        self.lock = threading.RLock()  # one thread at a time on the sockets (the idle watch, a stop's thread)
        self.ended = False
        self.started = time.time()
        self.supervisor: int | None = None  # its pid, once it said hello (local pools only)
        self.request: Request | None = None  # the request in flight
        self.collectives: dict[int, Message] = {}  # the latest COLLECTIVES_STATE of each rank

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

    @property
    def remote(self) -> bool:
        """Whether the ranks run on other machines (a scheduler's allocation, under torchrun)."""
        return self.lifecycle.placement.scheduled

    @property
    def supervised(self) -> bool:
        """Whether each rank lives and dies alone (the local supervisor); under torchrun one
        rank's death ends them all."""
        return not self.remote

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
        stall: float | None = None,
        on_stall: Callable[[RanksPool, float], None] | None = None,
    ) -> RanksPool:
        """A pool of ``nproc`` ranks (on each of ``nodes`` nodes), ready: every rank joined the
        process group and said hello. Waits queued while its GPUs are taken (``on_wait`` hears
        why). ``device="cpu"`` (or a machine without GPUs): gloo ranks that lease no GPU.
        ``backend="slurm"``: the ranks run on a Slurm allocation of ``nodes`` nodes (``slurm``:
        its ``SubmitOptions`` fields: partition, time, gpus_per_node...); the pool waits while
        Slurm holds the job pending. ``stall``: seconds after the ranks started (out of the
        queue) before ``on_stall`` hears that they have not all joined; the start goes on until
        they do, a rank's exit ends it, an interrupt too."""
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
        placement = placement_for(backend) if scheduled else SupervisedRanks()
        if not scheduled:
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
                pool._launch(on_wait)
                pool._await_hellos(stall, on_stall)
        except BaseException:
            if pool._end is not None:
                pool.end.close()
            raise
        return pool

    def _launch(self, on_wait: Callable[[str], None] | None) -> None:
        lifecycle = self.lifecycle
        files = lifecycle.files
        if self._end is not None:
            self.end.address.save(files.root / ADDRESS_FILE)
        files.script.with_name(POOL_SCRIPT).write_text(WORKER_SOURCE)
        env = {POOL_ADDRESS_ENV: str(files.root / ADDRESS_FILE), **FLIGHT_RECORDER}
        if not lifecycle.start(env=env, on_wait=on_wait, script=files.root / POOL_SCRIPT):
            lifecycle.end()
            raise JobError(f"ranks pool {lifecycle.run_id} was stopped before it started")
        if self._end is None:  # on an allocation: the channel once Slurm says where the ranks are
            scheduler_follower.ensure_running()  # records the job's end should this kernel die
            self.end = channel_on_allocation(lifecycle, on_wait)
            self.end.address.save(files.root / ADDRESS_FILE)

    def _await_hellos(self, stall: float | None, on_stall: Callable[[RanksPool, float], None] | None) -> None:
        started = None if self.supervised else time.monotonic()  # locally: once the supervisor forked them
        stalled = False
        try:
            while self.joining():
                if started is None and self.supervisor is not None:
                    started = time.monotonic()
                message = self.end.receive(PUMP_S)
                if message is not None:
                    self._dispatch(message)
                elif not self.lifecycle.running():
                    outcome = self.lifecycle.end()
                    raise JobError(f"ranks pool {self.run_id} could not start: {outcome.error or 'its ranks exited'}")
                elif stall and on_stall and started is not None and not stalled and time.monotonic() - started > stall:
                    stalled = True
                    on_stall(self, stall)
        finally:
            if stalled:  # over: every rank joined, or the start ended
                self.lifecycle.store.mark_stalled(self.run_id, None)

    def joining(self) -> list[int]:
        """The ranks started (or replaced) that have not said hello yet."""
        return [rank for rank, state in self.ranks.items() if state.state is RankState.JOINING]

    # -- requests ----------------------------------------------------------------------------------
    def begin(
        self,
        kind: Kind,
        fields: dict | None = None,
        ranks: Iterable[int] | None = None,
        buffers: Sequence[bytes] = (),
        on_message: Callable[[Message], None] | None = None,
        per_rank: dict[int, list[bytes]] | None = None,
    ) -> Request:
        """Sends a request to ``ranks`` (default: every rank); its replies come in through
        ``pump``. One request at a time. ``per_rank``: each rank's own buffers."""
        assert kind in REQUESTS, kind
        targets = tuple(sorted(set(range(self.nproc) if ranks is None else ranks)))
        bad = [rank for rank in targets if not 0 <= rank < self.nproc]
        if bad:
            raise JobError(f"rank {bad[0]} is not in this pool (ranks 0 to {self.nproc - 1})")
        request = Request(uuid.uuid4().hex[:12], kind, targets, on_message)
        header = {"request": request.id, **(fields or {})}
        with self.lock:
            self.request = request
            if per_rank is None:
                unreachable = self.end.broadcast(targets, Message(kind, header, list(buffers)))
            else:
                unreachable = [r for r in targets if not self.end.send(r, Message(kind, header, per_rank[r]))]
            request.shared = self.end.written()
        for rank in unreachable:  # its process is gone: the supervisor's report may still be on its way
            self.ranks[rank].state = RankState.DEAD
            request.died(self.ranks[rank].exit or RankExit(rank, self.ranks[rank].pid or 0, None, None))
        return request

    def pump(self, timeout: float = PUMP_S) -> None:
        """Takes what came within ``timeout`` seconds (the request's replies, a rank's exit, a
        replacement's hello); then, if the ranks' launcher is gone, every rank is dead."""
        with self.lock:
            if self.ended:
                return
            message = self.end.receive(timeout)
            while message is not None:
                self._dispatch(message)
                message = self.end.receive(0)
        if not self.alive():
            for rank in self.ranks.values():
                self._mark_dead(rank.rank, rank.exit or RankExit(rank.rank, rank.pid or 0, None, None))

    def _dispatch(self, message: Message) -> None:
        kind = message.kind
        if kind is Kind.HELLO:
            hello = Hello.of(message)
            rank = self.ranks[hello.rank]
            rank.hello, rank.state, rank.exit, rank.sequence = hello, RankState.READY, None, 0
        elif kind is Kind.SUPERVISOR:
            self.supervisor = int(message["pid"])
        elif kind is Kind.RANK_EXITED:
            death = RankExit.of(message)
            state = self.ranks[death.rank]
            if not (state.state is RankState.JOINING and death.pid == state.pid):  # not its predecessor's, late
                self._mark_dead(death.rank, death)
        elif kind is Kind.COLLECTIVES_STATE:
            self.collectives[int(message["rank"])] = message
        elif self.request is not None and self.request.take(message) and kind is Kind.DONE:
            self.ranks[int(message["rank"])].sequence = message.get("sequence")

    def _mark_dead(self, rank: int, death: RankExit) -> None:
        state = self.ranks[rank]
        if state.state is RankState.DEAD:
            return
        state.state, state.exit = RankState.DEAD, death
        if self.request is not None:
            self.request.died(death)

    def done(self, request: Request) -> None:
        with self.lock:
            if self.request is request:
                self.request = None
            self.end.remove_shared(request.shared)
            request.shared = []

    # -- the control thread of each rank -------------------------------------------------------------
    def interrupt(self, request: Request, ranks: Iterable[int]) -> None:
        """A ``KeyboardInterrupt`` in ``request`` on each of ``ranks``, if it still runs there."""
        with self.lock:
            for rank in ranks:
                self.end.control(rank, Message(Kind.INTERRUPT, {"request": request.id}))

    def abort(self, generation: int | None = None) -> None:
        """Aborts a generation of the process group (default: the current one) on every live
        rank: a collective blocked in it returns with an error (a rank waiting for a peer that
        failed, hangs or died), as does a rendezvous of a generation being joined. The ranks then
        wait for a rebuild (the agent's ``settle``)."""
        target = self.generation if generation is None else generation
        with self.lock:
            for rank in self.live():
                self.end.control(rank, Message(Kind.ABORT, {"generation": target}))

    def ask_collectives(self, ranks: Iterable[int], timeout: float = 1.0) -> dict[int, Message]:
        """Each rank's newest collectives (its flight recorder), answered by its control thread
        even while its main thread waits inside one."""
        asked = [rank for rank in ranks if self.ranks[rank].state is RankState.READY]
        token = uuid.uuid4().hex[:8]
        with self.lock:
            for rank in asked:
                self.collectives.pop(rank, None)
                self.end.control(rank, Message(Kind.COLLECTIVES, {"request": token}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(rank not in self.collectives for rank in asked):
            self.pump(max(0.0, min(0.05, deadline - time.monotonic())))
        return {rank: self.collectives[rank] for rank in asked if rank in self.collectives}

    # -- ranks -------------------------------------------------------------------------------------
    def live(self) -> list[int]:
        return [r.rank for r in self.ranks.values() if r.state is RankState.READY]

    def dead(self) -> list[int]:
        return [r.rank for r in self.ranks.values() if r.state is RankState.DEAD]

    def spawn(self, ranks: Iterable[int], generation: int) -> None:
        """Asks the supervisor for a new process for each of ``ranks`` (dead ones), to join the
        process group at ``generation``; their hellos come through ``pump``."""
        with self.lock:
            for rank in ranks:
                state = self.ranks[rank]
                state.state, state.restarts = RankState.JOINING, state.restarts + 1
                self.end.to_supervisor(Message(Kind.SPAWN, {"rank": rank, "generation": generation}))

    def kill(self, ranks: Iterable[int]) -> None:
        """SIGKILL to ranks that never came back (stuck in C++): the supervisor reports their
        exit; they can be replaced. On an allocation no rank dies alone: the pool ends."""
        if not self.supervised:
            self.end_now("a rank stuck where no interrupt reaches it (torchrun ranks die together)")
            return
        import os
        import signal

        for rank in ranks:
            pid = self.ranks[rank].pid
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue

    # -- following ---------------------------------------------------------------------------------
    def watch_idle(self) -> None:
        """A thread that, while no request is in flight, takes what the ranks and the supervisor
        send (a rank's exit) and records the pool's end within ``WATCH_S`` of its launcher's
        death, so a pool left idle never stays ``running`` with its GPUs. Started once the pool
        is ready; it ends with the pool."""
        threading.Thread(target=self._watch, name=f"jiyu-ranks-watch-{self.run_id}", daemon=True).start()

    def _watch(self) -> None:
        while not self.ended:
            time.sleep(WATCH_S)
            with self.lock:
                if self.ended or self.request is not None:
                    continue
                if not self.alive():
                    self.record_end()
                    return
                self.pump(0)

    def stop_asked(self, read: bool = False) -> bool:
        """Whether someone asked the pool's run to stop (``jiyu stop``, the panel's Stop): as the
        lifecycle last saw it, or (``read``) as the run row says now."""
        lifecycle = self.lifecycle
        if not lifecycle.stop_requested and (read or self.dead()):
            try:
                lifecycle.stop_requested = lifecycle.store.stored(self.run_id).stop_requested
            except StoreUnusable:
                return False
        return lifecycle.stop_requested

    def alive(self) -> bool:
        """Whether the ranks' launcher still runs (the supervisor; torchrun on an allocation)."""
        with self.lock:
            return not self.ended and self.lifecycle.running()

    def describe(self) -> str:
        on_host = " on node {host}" if self.remote else ""
        parts = []
        for state in self.ranks.values():
            if state.state is RankState.READY and state.hello is not None:
                where = on_host.format(host=state.hello.host)
                parts.append(f"rank {state.rank}: pid {state.hello.pid}{where} on {state.hello.device}")
            else:
                parts.append(f"rank {state.rank}: {state.state.value}")
        backend = next((s.hello.backend for s in self.ranks.values() if s.hello), "?")
        allocation = ""
        if self.remote:
            run = self.lifecycle.store.stored(self.run_id)
            allocation = f", Slurm job {run.scheduler_id}, {self.options['nodes']} node(s)"
        return (
            f"ranks pool {self.run_id} ({self.name}): {self.nproc} rank(s){allocation}, {backend}; {', '.join(parts)}"
        )

    # -- end ---------------------------------------------------------------------------------------
    def shutdown(self) -> str | None:
        """Asks every rank to end, waits for the launcher's exit (then stops what is left) and
        records the end; the end's line, or None when it was already over."""
        with self.lock:
            if self.ended:
                return None
            self.ended = True
            self.end.broadcast(self.live(), Message(Kind.SHUTDOWN))
            if self.supervised:
                self.end.to_supervisor(Message(Kind.SHUTDOWN))
            handle = self.lifecycle.handle
            deadline = time.monotonic() + (ALLOCATION_SHUTDOWN_S if self.remote else SHUTDOWN_S)
            while handle is not None and handle.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5 if self.remote else 0.01)
            try:
                outcome = self.lifecycle.end()
            except StoreUnusable as problem:  # the ranks are gone all the same; the store cannot say so
                return f"ranks pool {self.run_id} ended; its end is not recorded: {problem}"
            finally:
                self.end.close()
            return f"ranks pool {self.run_id} {outcome.status}" + (f": {outcome.error}" if outcome.error else "")

    def end_now(self, reason: str) -> None:
        """Ends the pool now (nothing left to save: every process, the run ``failed`` with
        ``reason``)."""
        with self.lock:
            if self.ended:
                return
            self.ended = True
            self.lifecycle.kill()
            self.lifecycle.end(error=reason)
            self.end.close()

    def record_end(self) -> str:
        """The run's end once its ranks' launcher is gone: its line."""
        with self.lock:
            if not self.ended:
                self.ended = True
                self.end.close()
            outcome = self.lifecycle.end()
            return outcome.error or f"its ranks exited ({outcome.status})"
