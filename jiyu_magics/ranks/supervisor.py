"""``python -m jiyu_magics.ranks.supervisor NPROC``: a local pool's ranks, forked from a warm
parent and supervised one by one.

Why not torchrun, as every other run on this machine: torchrun's agent treats its workers as one
group. When one dies it stops all the others (then restarts all of them, or ends), and a pool
exists to keep its ranks' state: a model loaded on 8 GPUs, an optimizer, a dataset in memory.
Here a rank that dies is reported to the kernel at once (its exit code, or the signal that killed
it: the OOM killer's SIGKILL) and the others live on; the kernel may ask for a replacement, which
joins the same world at the process group's next generation.

Why fork: importing torch, IPython and matplotlib and making the rank's shell is most of a rank's
start. The supervisor does it once, before any thread, CUDA context or ZMQ context exists, then
forks its fork server (``fork_server``), which forks each rank (copy-on-write) and, later, each
replacement, from a process that never runs a second thread. The supervisor hosts the pool's
rendezvous store (the ranks come and go; the store stays) and prefixes each rank's output with
``[rankN]:`` in the run's log, as torchrun does.

It ends once its kernel said shutdown (or a SIGTERM came) and no rank is left: the kernel's
``shutdown`` ends the ranks, a stop's SIGTERM reaches each rank (it stops, recorded). Until then
it waits, even with every rank dead, for the kernel to ask for replacements; it dies with the
kernel (its parent's death signal), the ranks with it.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import partial

import zmq

from ..core.processes.run_processes import POOL_SUPERVISOR_MARK
from ..core.runs.launch_context import POOL_ADDRESS_ENV, POOL_GENERATION_ENV, POOL_SUPERVISED_ENV, LaunchContext
from ..jobs.process import rank_records
from ..jobs.process.rank_worker import run_rank
from .channel import Address, SupervisorEnd
from .fork_server import Exited, ForkServer, Spawned
from .protocol import Kind, Message, RankExit

MARK = POOL_SUPERVISOR_MARK  # its command line: the pool's agent, as torchrun's for a job
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a traceback's colours are for the notebook, not the log


@dataclass
class Child:
    rank: int
    pid: int
    output: int  # the read end of its stdout/stderr pipe
    partial: bytes = b""


@dataclass
class Supervisor:
    nproc: int
    master: tuple[str, int]
    address: Address
    forks: ForkServer
    run_id: str | None = None  # the pool's run (its ranks' records), as the supervisor's launcher said
    children: dict[int, Child] = field(default_factory=dict)  # by pid
    end: SupervisorEnd | None = None
    last_exits: dict[int, int] = field(default_factory=dict)  # rank -> how its latest process ended
    stopping: bool = False  # a SIGTERM came, or the kernel's shutdown: once no rank is left, it ends
    asked: int = 0  # ranks asked of the fork server, not forked yet

    @property
    def exit_code(self) -> int:
        """0 when every rank's latest process ended cleanly (a shutdown, a stop), else 1."""
        return int(any(self.last_exits.values()))

    @property
    def waiting_for_replacements(self) -> bool:
        """No rank left, but the last ones died (killed, crashed): the kernel may replace them."""
        return not self.stopping and any(self.last_exits.values())

    def spawn(self, rank: int, generation: int) -> None:
        """Asks the fork server for rank ``rank``, to join the process group at ``generation``."""
        self.forks.spawn(rank, generation, self.master)
        self.asked += 1

    # -- the loop ------------------------------------------------------------------------------
    def serve(self) -> int:
        """Until no rank is left: their output to the log, their exits to the kernel, the
        kernel's requests for a replacement."""
        self.end = SupervisorEnd(self.address)
        self.end.send(Message(Kind.SUPERVISOR, {"pid": os.getpid()}))
        poller = zmq.Poller()
        poller.register(self.end.socket, zmq.POLLIN)
        poller.register(self.forks.fileno(), zmq.POLLIN)
        outputs: dict[int, Child] = {}
        while self.children or self.asked or self.waiting_for_replacements:
            for ready, _ in poller.poll():
                if ready is self.end.socket:
                    self._take_requests()
                elif ready == self.forks.fileno():
                    for news in self._from_fork_server():
                        if isinstance(news, Spawned):
                            outputs[news.output] = self.children[news.pid]
                            poller.register(news.output, zmq.POLLIN)
                        else:
                            child = self.children[news.pid]
                            poller.unregister(child.output)
                            del outputs[child.output]
                            self._reap(child, news.status)
                elif ready in outputs:
                    self._relay(outputs[ready])
        self.end.close()
        self.forks.close()
        return self.exit_code

    def _from_fork_server(self) -> list[Spawned | Exited]:
        news = self.forks.receive()
        if news is None:  # it died (killed): no rank can be forked or reaped any more
            raise SystemExit(f"{MARK}: the pool's fork server ended")
        for spawned in (n for n in news if isinstance(n, Spawned)):
            os.set_blocking(spawned.output, False)
            self.children[spawned.pid] = Child(spawned.rank, spawned.pid, spawned.output)
            self.asked -= 1
            if self.stopping:  # a SIGTERM came while it was being forked
                _terminate(spawned.pid)
        return news

    def _relay(self, child: Child) -> None:
        """What the rank printed, each line ``[rankN]: ``-prefixed, into the log."""
        chunks = []
        while True:
            try:
                chunk = os.read(child.output, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = child.partial + b"".join(chunks)
        *lines, child.partial = data.split(b"\n")
        if lines:
            text = "".join(f"[rank{child.rank}]: {ANSI.sub('', line.decode(errors='replace'))}\n" for line in lines)
            sys.stdout.write(text)
            sys.stdout.flush()

    def _reap(self, child: Child, status: int) -> None:
        """Its end, once what it printed last is in the log."""
        self._relay(child)
        del self.children[child.pid]
        if child.partial:
            child.partial += b"\n"
            self._relay(child)
        os.close(child.output)
        code = os.waitstatus_to_exitcode(status)
        killed_by = -code if code < 0 else None
        self.last_exits[child.rank] = code
        self._record(child, code, killed_by)
        assert self.end is not None
        self.end.send(RankExit(child.rank, child.pid, None if killed_by else code, killed_by).message())

    def _record(self, child: Child, code: int, killed_by: int | None) -> None:
        """The rank records its own end when it can; a kill it cannot: its parent says which
        signal it was (as torchrun's report does for a job's ranks)."""
        run_id = self.run_id
        if not run_id:
            return
        record = next((r for r in rank_records.read_all(run_id) if r.rank == child.rank and r.pid == child.pid), None)
        if record is None or record.ended is not None:
            return
        if killed_by is not None:
            record.signal = killed_by
        else:
            record.ended, record.exit_code = time.time(), code
        rank_records.write(run_id, record)

    def _take_requests(self) -> None:
        assert self.end is not None
        while (message := self.end.receive()) is not None:
            if message.kind is Kind.SPAWN and not self.stopping:
                self.spawn(int(message["rank"]), int(message["generation"]))
            elif message.kind is Kind.SHUTDOWN:
                self.stopping = True

    def stop(self, signum, frame) -> None:
        """SIGTERM to the supervisor (someone stopped it, not the pool's own stop, which signals
        the ranks): every rank stops, then the supervisor ends with them."""
        self.stopping = True
        for child in self.children.values():
            _terminate(child.pid)


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _rank(nproc: int, rank: int, generation: int, master: tuple[str, int]) -> int:
    """A forked rank's life, in the fork server's child."""
    for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": master[0],
            "MASTER_PORT": str(master[1]),
            POOL_GENERATION_ENV: str(generation),
            POOL_SUPERVISED_ENV: "1",
        }
    )  # for the rank's own code too: torch's env:// rendezvous, the cells that read RANK
    from .worker import serve

    context = LaunchContext.from_environ()  # the forked rank's entry point: read once, here
    return run_rank(lambda: serve(context), context, watch_peers=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit() or int(argv[0]) < 1:
        print(f"usage: python -m {MARK} NPROC", file=sys.stderr)
        return 2
    nproc = int(argv[0])
    warnings.filterwarnings(
        "ignore", message=".*fork.*", category=DeprecationWarning
    )  # forked before any thread of ours
    from ..jobs.process import parent_death
    from ..train.pool_group import host_store
    from .worker import warm

    parent_death.request(signal.SIGKILL)  # as torchrun: its fork server, then the ranks, die with it
    context = LaunchContext.from_environ()
    if context.pool_address is None:
        print(f"{MARK}: {POOL_ADDRESS_ENV} (the pool's address file) is not set", file=sys.stderr)
        return 2
    warm()
    forks = ForkServer.start(partial(_rank, nproc))  # while this process has one thread
    store = host_store()  # its thread (and ZMQ's, later) never sees a fork
    address = Address.load(context.pool_address)
    supervisor = Supervisor(nproc, ("127.0.0.1", store.port), address, forks, context.run_id)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel's interrupts reach the ranks over the channel
    for rank in range(nproc):
        supervisor.spawn(rank, generation=0)
    return supervisor.serve()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing left to clean up: finalizing torch, IPython and the store took two seconds
