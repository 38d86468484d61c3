"""One rank of a ranks pool: an IPython shell that runs the cells its kernel sends, keeping its
namespace, its process group and whatever it holds on its GPU from one cell to the next, and
through a failure: a peer's error, an interrupt, a peer's death.

On the kernel's machine the pool's supervisor (``ranks.supervisor``) forks each rank; on a
Slurm allocation torchrun starts it (``python -m jiyu_magics.jobs.process.rank_worker ranks.py``,
whose script runs ``serve``). Either way the rank joins its process group (``train.pool_group``:
NCCL on a GPU, gloo on the CPU, generation after generation), loads ``jiyu_magics`` into its
shell (so ``%%train`` and ``fit`` work in a cell) and says hello over the pool's channel.

Its main thread takes one request at a time: run a cell, take pushed objects, hand one back,
rebuild the process group. Everything it sends goes out through one sender thread, in order.
Its control thread takes what must reach it while the main thread is busy or blocked:

- an interrupt names the request it is for, and becomes a ``KeyboardInterrupt`` only while that
  request runs (the SIGINT handler checks, in the main thread), so an interrupt that comes as a
  cell ends never lands in the rank's own loop;
- an abort of a generation of its process group makes a collective blocked in it return (the
  main thread then ends its request ``aborted``, and waits for the rebuild);
- a question about its collectives is answered from torch's flight recorder, even while the
  main thread waits in one.

The rank never ends by itself: it ends when the kernel says so, when a stop's SIGTERM reaches it,
when its parent dies, or when its kernel is gone.
"""

from __future__ import annotations

import faulthandler
import os
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..core.processes import job_stop
from ..core.processes.info import process_start_time
from ..core.runs.files import RUN_ID_ENV, STACK_SIGNAL_NAME, RunFiles
from ..core.runs.launch_context import POOL_ADDRESS_ENV, LaunchContext
from .channel import KERNEL_GONE_SIGNAL, Address, KernelGone, RankEnd
from .objects import pack, unpack
from .protocol import Hello, Kind, Message, Reply, Status

STREAM_FLUSH_S = 0.02
ADDRESS_WAIT_S = 600.0  # a rank on an allocation waits this long for its kernel to write the address


class Sender(threading.Thread):
    """The one thread that writes to the kernel: messages leave in the order they were made,
    consecutive output of one stream merged (a loop that prints every step sends a few
    messages a second, not one per line)."""

    def __init__(self, end: RankEnd):
        super().__init__(name="jiyu-ranks-sender", daemon=True)
        self.end = end
        self.outbox: queue.SimpleQueue[Message | None] = queue.SimpleQueue()

    def put(self, message: Message) -> None:
        self.outbox.put(message)

    def run(self) -> None:
        pending: Message | None = None
        while True:
            try:
                message = self.outbox.get(timeout=STREAM_FLUSH_S if pending is not None else None)
            except queue.Empty:
                if pending is not None:
                    self.end.send(pending)
                    pending = None
                continue
            if message is None:  # the end: what is pending goes first
                if pending is not None:
                    self.end.send(pending)
                return
            if pending is not None and _same_stream(pending, message):
                pending.fields["text"] += message["text"]
                continue
            if pending is not None:
                self.end.send(pending)
                pending = None
            if message.kind is Kind.STREAM:
                pending = message
            else:
                self.end.send(message)

    def close(self) -> None:
        self.outbox.put(None)
        self.join(timeout=5)


def _same_stream(a: Message, b: Message) -> bool:
    return b.kind is Kind.STREAM and a.get("request") == b.get("request") and a.get("name") == b.get("name")


class ForwardedStream:
    """``sys.stdout``/``sys.stderr`` of a rank: to the rank's own output (the run's log) and,
    while a request runs, to the kernel."""

    def __init__(self, name: str, real, worker: Worker):
        self.name, self.real, self.worker = name, real, worker

    def write(self, text: str) -> int:
        self.real.write(text)
        request = self.worker.request
        if request is not None and text:
            self.worker.sender.put(
                Message(Kind.STREAM, {"request": request, "rank": self.worker.rank, "name": self.name, "text": text})
            )
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class Worker:
    def __init__(self, context: LaunchContext, address: Address, source: str | None = None):
        self.context = context
        self.rank = context.rank if context.rank is not None else 0
        self.pool_id = context.run_id
        self.end = RankEnd(address, self.rank, source)
        self.sender = Sender(self.end)
        self.request: str | None = None  # the request being handled (its output goes to the kernel)
        self.interruptible: str | None = None  # the request an interrupt may stop now
        self.interrupt_for: str | None = None  # the request the last interrupt named
        self.shell: Any = None
        self.group: Any = None  # train.pool_group.PoolGroup
        self.stacks: Any = None
        self.gone: str | None = None  # why the rank ends without its kernel's word
        self.dropped: list[str] = []  # the models whose failed step the request's end undid

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        self.sender.start()
        self.end.listen(self._control)
        self._stacks_on_signal()  # a rank stuck before it joins shows where (the kernel's start stall)
        self.group = self._group()
        self.group.join(self.context.pool_generation)
        self.shell = self._shell()
        signal.signal(signal.SIGINT, self._on_interrupt)
        sys.stdout = ForwardedStream("stdout", sys.__stdout__, self)
        sys.stderr = ForwardedStream("stderr", sys.__stderr__, self)
        hello = Hello(
            rank=self.rank,
            pid=os.getpid(),
            started=process_start_time(os.getpid()) or time.time(),
            host=socket.gethostname(),
            device=str(self.group.device),
            backend=self.group.backend,
            generation=self.group.generation,
        )
        self.end.hello(hello.message())

    def _group(self):
        from ..train.pool_group import rank_group

        hosts_store = not self.context.pool_supervised  # under torchrun rank 0 hosts it, as env:// would
        return rank_group(self.context, self.end.address.ports, host_store_here=hosts_store)

    def _shell(self):
        from .rank_shell import forward_displays, prepared_shell

        shell = prepared_shell()  # made already where the supervisor forked this rank
        forward_displays(shell, self)
        return shell

    def _stacks_on_signal(self) -> None:
        """Every thread's stack into the pool's file on the stack signal, for the stall view;
        registered again after each request (a ``fit`` registers its own run's for its length)."""
        signum = getattr(signal, STACK_SIGNAL_NAME, None)
        if signum is None or not self.pool_id:
            return
        if self.stacks is None:
            from ..train.stack_signal import serve_stack_requests

            path = RunFiles.of(self.pool_id).stack_live(self.rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.stacks = open(path, "a")  # noqa: SIM115 - held for the rank's life
            serve_stack_requests(self.pool_id, signum)  # a kernel on another machine asks through the run folder
        faulthandler.register(signum, file=self.stacks, all_threads=True, chain=False)

    # -- the control thread -------------------------------------------------------------------
    def _control(self, message: Message) -> Message | None:
        if message.kind is Kind.INTERRUPT:
            target = message["request"]
            if self.interruptible == target:
                self.interrupt_for = target
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        elif message.kind is Kind.ABORT:
            if self.group is not None and self.group.generation == message["generation"]:
                self.group.abort()
        elif message.kind is Kind.COLLECTIVES:
            return self._collectives(message["request"])
        return None

    def _on_interrupt(self, signum, frame) -> None:
        """SIGINT in the main thread: a ``KeyboardInterrupt`` only in the request an interrupt
        named, while it runs; any other (late, or a stray signal) is dropped. Dropped too when
        the process group was aborted and its error is being handled already (the interrupt
        came while the rank was blocked in the collective): raised there, it would cut the
        formatting of that error short. (The rank's shell leaves this frame out of tracebacks.)"""
        target = self.interrupt_for
        if target is None or target != self.interruptible:
            return
        self.interrupt_for = None
        if self.group is not None and self.group.aborted and sys.exc_info()[0] is not None:
            return
        raise KeyboardInterrupt

    def collective_aborted(self) -> bool:
        """Whether the process group was aborted under the request that runs (its error is the
        abort's, not the cell's own)."""
        return self.group is not None and self.group.aborted and self.request is not None

    def _collectives(self, request: str) -> Message:
        from ..train.pool_group import flight_record

        group = self.group
        fields = {
            "request": request,
            "rank": self.rank,
            "busy": self.request is not None,
            "generation": group.generation if group is not None else None,
            "sequence": group.sequence() if group is not None else None,
            "entries": flight_record(),
        }
        return Message(Kind.COLLECTIVES_STATE, fields)

    # -- requests ----------------------------------------------------------------------------
    def serve(self) -> None:
        signal.signal(KERNEL_GONE_SIGNAL, self._kernel_gone)
        while True:
            if self.gone:
                raise KernelGone(self.gone)
            message = self.end.receive()
            if message is None:
                continue
            if message.kind is Kind.SHUTDOWN:
                return
            self.request = message.get("request")
            self.dropped = []
            started = time.perf_counter()
            status, refusal = self._handle(message)
            if message.kind is Kind.EXECUTE and status is not Status.OK:
                self._drop_failed_step()  # no longer interruptible: an interrupt now is late, dropped
            self.request = None
            if job_stop.noted():  # a stop (SIGTERM) came during the request: the rank ends, recorded stopped
                raise job_stop.JobStopped()
            sys.stdout.flush()
            sys.stderr.flush()
            group = self.group
            reply = Reply(
                rank=self.rank,
                status=status,
                elapsed=time.perf_counter() - started,
                refusal=refusal,
                generation=group.generation,
                sequence=group.sequence(),
                dropped=tuple(self.dropped),
            )
            self.sender.put(reply.message(message["request"]))
            self._stacks_on_signal()

    def _handle(self, message: Message) -> tuple[Status, str | None]:
        """The request, interruptible while it runs (and only then)."""
        handler = {
            Kind.EXECUTE: self._execute,
            Kind.PUSH: self._push,
            Kind.PULL: self._pull,
            Kind.REBUILD: self._rebuild,
        }.get(message.kind)
        if handler is None:
            return Status.REFUSED, f"unknown request {message.kind.value!r}"
        try:
            self.interruptible = message["request"]
            try:
                return handler(message)
            finally:
                self.interruptible = None
        except KeyboardInterrupt:
            return Status.INTERRUPTED, None

    def _kernel_gone(self, signum, frame) -> None:
        """The channel's thread lost the kernel: end now, or after the cell that runs (a cell
        that catches every exception must not keep the rank alive)."""
        self.gone = "its kernel is gone: no connection to it; the ranks pool ends with it"
        raise KernelGone(self.gone)

    def _execute(self, message: Message) -> tuple[Status, str | None]:
        train = message.get("train")
        magics = self.shell.magics_manager.registry.get("TrainMagics")
        if train and magics is not None:
            magics.launch_context = LaunchContext(
                run_id=train["run_id"],
                rank=self.context.rank,
                world_size=self.context.world_size,
                local_rank=self.context.local_rank,
                notebook=train.get("notebook"),
                visible_devices=self.context.visible_devices,
                text_ui=self.context.text_ui,
                pool_address=self.context.pool_address,
            )
        try:
            result = self.shell.run_cell(message["code"], store_history=True)
        finally:
            if magics is not None:
                magics.launch_context = None
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return Status.OK, None
        if self.group.aborted:  # its collective was aborted (an interrupt may have come on top)
            return Status.ABORTED, None
        if isinstance(error, KeyboardInterrupt):
            return Status.INTERRUPTED, None
        return Status.ERROR, None

    def _drop_failed_step(self) -> None:
        """The DDP and FSDP models the rank holds leave the step the cell failed in
        (``train.failed_step``): the next cell trains on from the weights before it."""
        from ..train.failed_step import drop_failed_step

        try:
            self.dropped = drop_failed_step(self.shell.user_ns)
        except Exception as problem:  # noqa: BLE001 - said in the rank's log; the cell's own error stands
            print(
                f"jiyu: the failed step could not be undone: {type(problem).__name__}: {problem}", file=sys.__stderr__
            )

    def _push(self, message: Message) -> tuple[Status, str | None]:
        names, counts = message["names"], message["counts"]
        if isinstance(counts, dict):  # a scatter: each rank's part, counted for each rank
            counts = counts[str(self.rank)]
        values = {}
        at = 0
        for name, count in zip(names, counts, strict=True):
            try:
                (values[name],) = unpack([count], message.buffers[at : at + count])
            except Exception as error:  # noqa: BLE001 - any unpickling failure is the user's to read
                return Status.REFUSED, f"{name} cannot be unpickled here: {type(error).__name__}: {error}"
            at += count
        self.shell.user_ns.update(values)
        return Status.OK, None

    def _pull(self, message: Message) -> tuple[Status, str | None]:
        from ..train.weight_handoff import portable

        name = message["name"]
        if name not in self.shell.user_ns:
            return Status.REFUSED, f"rank {self.rank} has no {name!r}"
        value, kind = portable(self.shell.user_ns[name])
        try:
            counts, buffers = pack([value])
        except Exception as error:  # noqa: BLE001 - what cannot be pickled says why
            return Status.REFUSED, f"{name} cannot be pickled: {type(error).__name__}: {error}"
        fields = {"request": self.request, "rank": self.rank, "name": name, "form": kind, "counts": counts}
        self.sender.put(Message(Kind.VALUE, fields, buffers))
        return Status.OK, None

    def _rebuild(self, message: Message) -> tuple[Status, str | None]:
        """Leaves the process group (aborted, or made inconsistent) and joins its next generation
        with every other live rank. Not interruptible: the kernel aborts a rendezvous that hangs."""
        self.interruptible = None
        try:
            self.group.rebuild(int(message["generation"]), replaced=message.get("replaced", ()))
        except Exception as error:  # noqa: BLE001 - the kernel decides what a failed rebuild means
            return Status.ERROR, f"could not join generation {message['generation']}: {type(error).__name__}: {error}"
        return Status.OK, None

    def close(self) -> None:
        self.sender.close()
        self.end.close()


def serve(context: LaunchContext | None = None) -> None:
    """A rank's life: join, say hello, take requests until the kernel says stop. On an
    allocation the kernel writes the pool's address once Slurm runs the job: wait for it.
    ``context``: what the rank's supervisor read where it forked it; else read here, the entry
    point of a rank torchrun started (its script calls ``serve()``)."""
    context = context or LaunchContext.from_environ()
    os.environ.pop(RUN_ID_ENV, None)  # a fit in a cell registers a run of its own, not into the pool's
    if context.pool_address is None:
        raise SystemExit(f"jiyu: a ranks pool's rank needs {POOL_ADDRESS_ENV} (its pool's address file)")
    on_allocation = context.slurm_job is not None
    address = Address.load(context.pool_address, wait=ADDRESS_WAIT_S if on_allocation else 0.0)
    worker = Worker(context, address, source=node_source_address(context.slurm_node) if on_allocation else None)
    try:
        worker.start()
        worker.serve()
    finally:
        worker.close()


def node_source_address(name: str | None) -> str | None:
    """The address a rank on an allocation connects from: its node's, as the node resolves its
    own Slurm name (``name``), so the kernel's allowlist (Slurm's ``NodeAddr`` of each node)
    recognises it. None where that address is not one of this machine's (the route's is used then)."""
    if not name:
        return None
    try:
        address = socket.gethostbyname(name)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return None
    return address


def warm() -> None:
    """What every rank needs, made once by the supervisor before it forks them: torch and its
    distributed package, the rank's shell with ``jiyu_magics`` loaded (most of a rank's start).
    What only some cells use (the training engine, matplotlib) is imported by the cells that do."""
    from ..train import pool_group  # noqa: F401
    from .rank_shell import prepared_shell

    prepared_shell()


if __name__ == "__main__":
    serve()
