"""The pool's fork server: the one process that forks a local pool's ranks, and it runs no thread
but its main one.

Why a process of its own: a child forked from a process where another thread runs inherits every
lock that thread held at that instant, held forever. The supervisor hosts the pool's rendezvous
store (torch's ``TCPStore``: a libuv thread that looks up each connecting peer's name) and its
channel to the kernel (ZMQ's I/O threads). A rank forked while the store's thread was inside
glibc's resolver hung in its own first ``getnameinfo`` (``__resolv_context_get``), before it joined
the process group, and the other ranks then waited in gloo's rendezvous for it: ``%ranks start``
never returned (one start of 8 ranks in three under load, with every rank's stack taken). So the
supervisor forks this server first, while it is warm (torch and the rank's shell imported) and
still single-threaded, and asks it for each rank, the first ones and every replacement.

The server is the ranks' parent: it reaps them and reports each exit (its pid and wait status)
over its socket, passing each rank's output pipe to the supervisor as it forks it. It ignores
SIGTERM and SIGINT (a stop reaches the ranks, which it must see end); it ends when the supervisor
closes its socket, or dies with it (the parent's death signal), and the ranks then get theirs.
Its process name (``NAME``) tells a stop that it is neither a rank nor a stray.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ..core.processes.run_processes import POOL_FORK_SERVER_NAME
from ..jobs.process import parent_death

NAME = POOL_FORK_SERVER_NAME
MESSAGE_BYTES = 4096
PR_SET_NAME = 15
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up once, before any fork

RankMain = Callable[[int, int, tuple[str, int]], int]  # rank, generation, the store's address -> exit code


@dataclass(frozen=True)
class Spawned:
    rank: int
    pid: int
    output: int  # the read end of the rank's stdout/stderr pipe, now the supervisor's


@dataclass(frozen=True)
class Exited:
    pid: int
    status: int  # as ``os.waitpid`` gives it


class ForkServer:
    """The supervisor's handle on its fork server."""

    def __init__(self, sock: socket.socket, pid: int):
        self.sock, self.pid = sock, pid

    @classmethod
    def start(cls, rank_main: RankMain) -> ForkServer:
        """Forks the server; call it before this process starts any thread."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def server() -> int:
            ours.close()
            return _serve(theirs, rank_main)

        pid = _fork(server)
        theirs.close()
        ours.setblocking(False)  # receive takes what is there (socket.recv_fds takes no MSG_DONTWAIT)
        return cls(ours, pid)

    def fileno(self) -> int:
        return self.sock.fileno()

    def spawn(self, rank: int, generation: int, master: tuple[str, int]) -> None:
        """Asks for rank ``rank`` at ``generation``; ``Spawned`` comes back through ``receive``."""
        self.sock.setblocking(True)
        try:
            self.sock.send(json.dumps({"rank": rank, "generation": generation, "master": list(master)}).encode())
        finally:
            self.sock.setblocking(False)

    def receive(self) -> list[Spawned | Exited] | None:
        """What the server said since the last call; None once it is gone."""
        said: list[Spawned | Exited] = []
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, MESSAGE_BYTES, 1)
            except BlockingIOError:
                return said
            if not data:
                return said or None
            message = json.loads(data)
            if "exited" in message:
                said.append(Exited(int(message["exited"]), int(message["status"])))
            else:
                said.append(Spawned(int(message["rank"]), int(message["pid"]), fds[0]))

    def close(self) -> None:
        """Ends the server (it has no rank left to wait for) and reaps it."""
        self.sock.close()
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _serve(sock: socket.socket, rank_main: RankMain) -> int:
    parent_death.request(signal.SIGKILL)  # the ranks then get their own parent's death signal
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    comm = _name()
    _set_name(NAME)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for fd, _ in poller.poll():
            if fd == sock.fileno():
                data = sock.recv(MESSAGE_BYTES)
                if not data:  # the supervisor is done: no rank is left
                    return 0
                request = json.loads(data)
                host, port = request["master"]
                main = partial(rank_main, int(request["rank"]), int(request["generation"]), (host, int(port)))
                pid, output = _fork_rank(sock, children, comm, main)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                poller.register(pidfd, select.POLLIN)
                socket.send_fds(sock, [json.dumps({"rank": request["rank"], "pid": pid}).encode()], [output])
                os.close(output)
            else:
                poller.unregister(fd)
                pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"exited": pid, "status": status}).encode())


def _fork_rank(sock: socket.socket, children: dict[int, int], comm: str, main: Callable[[], int]) -> tuple[int, int]:
    """Forks a rank, its stdout and stderr a new pipe; its pid and the pipe's read end."""
    read, write = os.pipe()

    def rank() -> int:
        sock.close()
        os.close(read)
        for pidfd in children:
            os.close(pidfd)
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        _set_name(comm)
        return main()

    pid = _fork(rank)
    os.close(write)
    return pid, read


def _fork(child: Callable[[], int]) -> int:
    """Forks a process that runs ``child`` and exits with its code (1, its traceback printed, on
    any exception): it never returns into the forking process's code. The child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        except BaseException:  # noqa: BLE001 - whatever ends it, it ends here, said
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _name() -> str:
    with open("/proc/self/comm") as comm:
        return comm.read().strip()


def _set_name(name: str) -> None:
    _prctl(PR_SET_NAME, name.encode())
