"""One rank of a ranks pool (``%ranks start``): an IPython shell under torchrun that runs the
cells its kernel sends, keeping its namespace, its process group and whatever it holds on its
GPU from one cell to the next.

torchrun starts it through the jobs' rank entry point (``jobs.process.rank_worker``, which
records the rank, dies with its agent and takes SIGTERM as a stop), running the pool's
``ranks.py``, which calls ``serve``. ``serve`` joins the process group once (NCCL on a GPU,
gloo on the CPU), loads ``jiyu_magics`` into the shell (so ``%%train`` and ``fit`` work in a
cell) and says hello to the kernel over the pool's signed channel (``jobs.ranks.channel``).
Then, on its main thread, it takes one request at a time: run a cell, take pushed objects,
hand an object back. Everything it sends (the cell's output as it is printed, displays, its
error with the cell's own traceback, the end of the request) goes out through one sender
thread, in order; the output also goes to the rank's own stdout (the run's log).

A kernel interrupt reaches the rank as SIGINT: a ``KeyboardInterrupt`` in the running cell,
or inside ``fit`` a stop at the next step with a checkpoint. On this machine the kernel sends
the signal; on an allocation's nodes it sends an interrupt on the rank's control socket, whose
thread raises the signal in the rank. The rank never ends by itself:
it ends when the kernel says so, when a stop request's SIGTERM reaches it, or with its agent.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..core.runs.files import RUN_ID_ENV, STACK_SIGNAL_NAME, RunFiles
from ..core.runs.launch_context import LaunchContext
from ..jobs.ranks.channel import ADDRESS_ENV, KERNEL_GONE_SIGNAL, Address, KernelGone, Message, RankEnd

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
                message = None
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
            if message.kind == "stream":
                pending = message
            else:
                self.end.send(message)

    def close(self) -> None:
        self.outbox.put(None)
        self.join(timeout=5)


def _same_stream(a: Message, b: Message) -> bool:
    return b.kind == "stream" and a.get("request") == b.get("request") and a.get("name") == b.get("name")


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
                Message("stream", {"request": request, "rank": self.worker.rank, "name": self.name, "text": text})
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
        self.request: str | None = None
        self.shell: Any = None
        self.stacks: Any = None
        self.gone: str | None = None  # why the rank ends without its kernel's word

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        self.sender.start()
        self.end.listen_for_interrupts()
        device, backend = self._join_group()
        self.shell = self._shell()
        self._stacks_on_signal()
        sys.stdout = ForwardedStream("stdout", sys.__stdout__, self)
        sys.stderr = ForwardedStream("stderr", sys.__stderr__, self)
        self.end.hello(
            Message(
                "hello",
                {
                    "rank": self.rank,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "device": device,
                    "backend": backend,
                },
            )
        )

    def _join_group(self) -> tuple[str, str]:
        from ..train.process_group import join_for_good

        return join_for_good(self.context)

    def _shell(self):
        from traitlets.config import Config

        from .rank_display import RankShell, forward_displays

        config = Config()
        # In/Out kept in memory: every rank writing the one history file on disk made each cell
        # wait ~40 ms on SQLite's lock (found with py-spy on a no-op cell)
        config.HistoryManager.hist_file = ":memory:"
        shell = RankShell.instance(config=config)
        forward_displays(shell, self)
        shell.extension_manager.load_extension("jiyu_magics")
        try:
            shell.enable_matplotlib("inline")
        except ImportError:  # no matplotlib: there are no figures to show
            pass
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

    # -- requests ----------------------------------------------------------------------------
    def serve(self) -> None:
        signal.signal(KERNEL_GONE_SIGNAL, self._kernel_gone)
        while True:
            if self.gone:
                raise KernelGone(self.gone)
            try:
                message = self.end.receive()
            except KeyboardInterrupt:  # an interrupt meant for a cell that already ended
                continue
            if message is None:
                continue
            if message.kind == "shutdown":
                return
            self.request = message.get("request")
            started = time.perf_counter()
            try:
                status, reply = self._handle(message)
            except KeyboardInterrupt:
                status, reply = "interrupted", {}
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            self.sender.put(
                Message(
                    "done",
                    {
                        "request": self.request,
                        "rank": self.rank,
                        "status": status,
                        "elapsed": time.perf_counter() - started,
                        **reply,
                    },
                )
            )
            self.request = None
            self._stacks_on_signal()

    def _kernel_gone(self, signum, frame) -> None:
        """The channel's thread lost the kernel: end now, or after the cell that runs (a cell
        that catches every exception must not keep the rank alive)."""
        self.gone = "its kernel is gone: no connection to it; the ranks pool ends with it"
        raise KernelGone(self.gone)

    def _handle(self, message: Message) -> tuple[str, dict]:
        if message.kind == "execute":
            return self._execute(message)
        if message.kind == "push":
            return self._push(message)
        if message.kind == "pull":
            return self._pull(message)
        return "error", {"error": f"unknown request {message.kind!r}"}

    def _execute(self, message: Message) -> tuple[str, dict]:
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
            )
        try:
            result = self.shell.run_cell(message["code"], store_history=True)
        finally:
            if magics is not None:
                magics.launch_context = None
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            return "ok", {}
        if isinstance(error, KeyboardInterrupt):
            return "interrupted", {}
        return "error", {"error": f"{type(error).__name__}: {error}".strip()}

    def _push(self, message: Message) -> tuple[str, dict]:
        names = message["names"]
        values = {}
        for name, buffer in zip(names, message.buffers, strict=True):
            try:
                values[name] = pickle.loads(buffer)
            except Exception as error:  # noqa: BLE001 - any unpickling failure is the user's to read
                return "error", {"error": f"{name} cannot be unpickled here: {type(error).__name__}: {error}"}
        self.shell.user_ns.update(values)
        return "ok", {}

    def _pull(self, message: Message) -> tuple[str, dict]:
        from ..train.weight_handoff import portable

        name = message["name"]
        if name not in self.shell.user_ns:
            return "error", {"error": f"rank {self.rank} has no {name!r}"}
        value, kind = portable(self.shell.user_ns[name])
        try:
            buffer = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # noqa: BLE001 - what cannot be pickled says why
            return "error", {"error": f"{name} cannot be pickled: {type(error).__name__}: {error}"}
        self.sender.put(
            Message("value", {"request": self.request, "rank": self.rank, "name": name, "form": kind}, [buffer])
        )
        return "ok", {}

    def close(self) -> None:
        self.sender.close()
        self.end.close()


def serve() -> None:
    """The pool's ``ranks.py``: join, say hello, take requests until the kernel says stop. On
    an allocation the kernel writes the pool's address once Slurm runs the job: wait for it."""
    context = LaunchContext.from_environ()
    os.environ.pop(RUN_ID_ENV, None)  # a fit in a cell registers a run of its own, not into the pool's
    on_allocation = bool(os.environ.get("SLURM_JOB_ID"))
    address = Address.load(os.environ[ADDRESS_ENV], wait=ADDRESS_WAIT_S if on_allocation else 0.0)
    worker = Worker(context, address, source=node_source_address() if on_allocation else None)
    try:
        worker.start()
        worker.serve()
    finally:
        worker.close()


def node_source_address() -> str | None:
    """The address a rank on an allocation connects from: its node's, as the node resolves its
    own Slurm name, so the kernel's allowlist (Slurm's ``NodeAddr`` of each node) recognises it.
    None where that address is not one of this machine's (the route's is used then)."""
    name = os.environ.get("SLURMD_NODENAME")
    if not name:
        return None
    try:
        address = socket.gethostbyname(name)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return None
    return address
