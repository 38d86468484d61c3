"""The channel between a notebook kernel and the ranks of its pool: ZMQ, signed.

The kernel binds two sockets on the loopback interface only (``127.0.0.1``, ports the system
picks): a ROUTER it sends requests on, one rank at a time by the rank's identity, and a PULL it
receives everything on. Each rank connects a DEALER (it says hello on it, then only receives
requests) and a PUSH (its sender thread's: output, displays, replies, in the order they were
made). Every message is ``[signature, header, *buffers]``: the header is JSON, the buffers are
pickles (pushed and pulled objects), and the signature is an HMAC-SHA256 of header and buffers
under the pool's secret (32 random bytes, in a file only its owner can read). A message whose
signature does not verify is dropped before anything in it is read; nothing is unpickled from
an unverified sender.

ZMQ queues what is sent before the other end connects, so no first message is lost (a rank's
hello waits for the kernel, the kernel binds before it starts the ranks), and nothing here polls
on a fixed period: the kernel waits on its PULL socket until something comes.

Ranks on other machines (a pool on a Slurm allocation, ``jobs.ranks.allocation``): the kernel
binds on the address that reaches them, and only once the allocation's nodes are known; ZMQ's
own authentication handler (ZAP, pyzmq's ``ThreadAuthenticator``) then lets in connections from
those nodes' addresses alone, so nothing else on the network reaches the sockets, and the
signature still guards every message. Each rank connects from the address its node has there
(ZMQ's ``source;destination`` form). A rank also connects a second DEALER, its control socket,
read by a thread of its own: an interrupt sent there raises SIGINT in the rank's main thread,
as the kernel's ``kill`` does for ranks on its own machine.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import recv_monitor_message

from .protocol import Kind, Message

LOOPBACK = "tcp://127.0.0.1"
ADDRESS_ENV = "JIYU_POOL"  # where a rank finds its pool's address file
KEY_BYTES = 32
ZAP_DOMAIN = "jiyu-ranks"
HEARTBEAT_S = 2  # ZMQ heartbeats on a rank's control socket: a silent peer is dropped after 3 of them
KERNEL_GONE_S = 10.0  # a rank without its kernel this long ends (a restart of the kernel never comes back)
EXIT_GRACE_S = 30.0  # what a rank's stop gets before it exits anyway
KERNEL_GONE_SIGNAL = signal.SIGHUP  # a hangup: the rank's controlling end went away
HANDSHAKE_MS = 5000  # a connection that has not finished ZMTP's handshake by then is dropped
SUPERVISOR_IDENTITY = b"supervisor"


class KernelGone(Exception):
    """Raised in a rank's main thread once its kernel is gone: the rank ends, recorded failed."""


@dataclass(frozen=True)
class Address:
    """Where a pool's kernel listens and the secret its messages are signed with: written to
    the pool's folder (mode 0600) for its ranks, never put in an environment variable."""

    requests: str  # the kernel's ROUTER (ranks connect a DEALER)
    replies: str  # the kernel's PULL (ranks connect a PUSH)
    key: str  # hex

    def save(self, path: Path) -> None:
        """Written whole, then renamed into place: a rank that waits for the file (on another
        node) never reads half of it."""
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"requests": self.requests, "replies": self.replies, "key": self.key}, out)
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path | str, wait: float = 0.0) -> Address:
        """The address in ``path``; waits up to ``wait`` seconds for the file to appear (a pool
        on an allocation writes it once it knows the allocation's nodes)."""
        path = Path(path)
        deadline = time.monotonic() + wait
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not path.exists():
            raise SystemExit(f"jiyu: no ranks pool address in {path} after {wait:.0f} s (did its kernel end?)")
        return cls(**json.loads(path.read_text()))


class Signer:
    def __init__(self, key: bytes):
        self.key = key

    def frames(self, message: Message) -> list[bytes]:
        header = json.dumps({"kind": message.kind.value, **message.fields}, default=str).encode()
        return [self._sign(header, message.buffers), header, *message.buffers]

    def message(self, frames: Sequence[bytes]) -> Message | None:
        """The message the frames carry, or None when they are not signed with the key."""
        if len(frames) < 2 or not hmac.compare_digest(frames[0], self._sign(frames[1], frames[2:])):
            return None
        fields = json.loads(frames[1])
        return Message(Kind(fields.pop("kind")), fields, list(frames[2:]))

    def _sign(self, header: bytes, buffers: Sequence[bytes]) -> bytes:
        mac = hmac.new(self.key, header, hashlib.sha256)
        for buffer in buffers:
            mac.update(buffer)
        return mac.hexdigest().encode()


class KernelEnd:
    """The kernel's side: requests to a rank (its main thread, or its control thread), to the
    supervisor, and everything the ranks and the supervisor send, in one stream."""

    def __init__(self, host: str | None = None, allowed: Sequence[str] = ()) -> None:
        """On the loopback interface; or on ``host``, letting in connections from the
        ``allowed`` addresses only (ranks on other machines)."""
        self.context = zmq.Context()
        self.authenticator: ThreadAuthenticator | None = None
        if host is not None:
            self.authenticator = ThreadAuthenticator(self.context)
            self.authenticator.start()
            self.authenticator.allow(*allowed)
        self.requests = self._socket(zmq.ROUTER)
        self.requests.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a rank that is not connected is an error, not a drop
        self.replies = self._socket(zmq.PULL)
        where = LOOPBACK if host is None else f"tcp://{host}"
        requests_port = self.requests.bind_to_random_port(where)
        replies_port = self.replies.bind_to_random_port(where)
        key = secrets.token_bytes(KEY_BYTES)
        self.signer = Signer(key)
        self.address = Address(f"{where}:{requests_port}", f"{where}:{replies_port}", key.hex())
        self.dropped = 0  # messages whose signature did not verify
        self.poller = zmq.Poller()
        self.poller.register(self.replies, zmq.POLLIN)
        self.poller.register(self.requests, zmq.POLLIN)

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        if self.authenticator is not None:
            sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)  # NULL-mechanism connections go through the allowlist
        return sock

    @property
    def ports(self) -> frozenset[int]:
        return frozenset(int(endpoint.rsplit(":", 1)[1]) for endpoint in (self.address.requests, self.address.replies))

    def send(self, rank: int, message: Message) -> bool:
        """A request to the rank's main thread; False when the rank is not connected (gone)."""
        return self._route(identity(rank), self.signer.frames(message))

    def broadcast(self, ranks: Sequence[int], message: Message) -> list[int]:
        """One request to several ranks, signed once (a push of 40 MB is hashed once, not once
        per rank); the ranks it could not reach."""
        frames = self.signer.frames(message)
        return [rank for rank in ranks if not self._route(identity(rank), frames)]

    def control(self, rank: int, message: Message) -> bool:
        """To the rank's control thread (an interrupt, an abort, a question), which reads while
        the rank's main thread is busy or blocked; False when it is not connected."""
        return self._route(control_identity(rank), self.signer.frames(message))

    def to_supervisor(self, message: Message) -> bool:
        return self._route(SUPERVISOR_IDENTITY, self.signer.frames(message))

    def _route(self, to: bytes, frames: list[bytes]) -> bool:
        try:
            self.requests.send_multipart([to, *frames], copy=False)
        except zmq.ZMQError:  # EHOSTUNREACH: that peer is gone (or not connected yet)
            return False
        return True

    def receive(self, timeout: float | None) -> Message | None:
        """The next verified message from a rank or the supervisor, or None when nothing came
        within ``timeout`` seconds (None: wait). Unsigned messages are dropped, and never hold
        the caller past its deadline however many of them come."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = dict(self.poller.poll(None if left is None else int(left * 1000)))
            if not ready:
                return None
            if self.replies in ready:
                message = self.signer.message(self.replies.recv_multipart())
            else:  # on the ROUTER: [identity, signature, header, ...] from a DEALER
                message = self.signer.message(self.requests.recv_multipart()[1:])
            if message is not None:
                return message
            self.dropped += 1
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def close(self) -> None:
        self.requests.close(0)
        self.replies.close(0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()


ControlHandler = Callable[[Message], "Message | None"]


class RankEnd:
    """A rank's side: requests in on the main thread, everything out through one sender, and a
    control thread for what must reach the rank while its main thread is busy."""

    def __init__(self, address: Address, rank: int, source: str | None = None):
        """``source``: the address to connect from (the node's own, which the kernel allows)."""
        self.context = zmq.Context()
        self.signer = Signer(bytes.fromhex(address.key))
        self.address, self.rank, self.source = address, rank, source
        self.requests = self.context.socket(zmq.DEALER)
        self.requests.setsockopt(zmq.IDENTITY, identity(rank))
        self.requests.setsockopt(zmq.LINGER, 0)
        self.requests.connect(_from_source(source, address.requests))
        self.replies = self.context.socket(zmq.PUSH)
        self.replies.setsockopt(zmq.LINGER, 2000)  # the last replies reach the kernel before exit
        self.replies.connect(_from_source(source, address.replies))
        self.control: threading.Thread | None = None

    def listen(self, handler: ControlHandler) -> None:
        """A thread on the rank's control socket: each message goes to ``handler`` (in this
        thread, while the main thread may be blocked in C++), whose answer goes back. It also
        watches the connection: a kernel that is gone (killed, its machine lost: ZMQ's
        heartbeat stops) for ``KERNEL_GONE_S`` ends the rank (``KERNEL_GONE_SIGNAL`` in its main
        thread, whose handler the rank worker sets; for good ``EXIT_GRACE_S`` later), so no
        rank of a dead kernel keeps its allocation and GPUs (on the kernel's own machine the
        ranks also die with it)."""
        main = threading.main_thread().ident
        assert main is not None
        control = self.context.socket(zmq.DEALER)
        control.setsockopt(zmq.IDENTITY, control_identity(self.rank))
        control.setsockopt(zmq.LINGER, 0)
        control.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_S * 1000)
        control.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_S * 3000)
        monitor = control.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        control.connect(_from_source(self.source, self.address.requests))
        poller = zmq.Poller()
        poller.register(control, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)

        def serve() -> None:
            gone_since: float | None = None
            try:
                while True:
                    ready = dict(poller.poll(1000))
                    if monitor in ready:
                        event = recv_monitor_message(monitor)["event"]
                        connected = event == zmq.EVENT_HANDSHAKE_SUCCEEDED
                        gone_since = None if connected else gone_since or time.monotonic()
                    if control in ready:
                        message = self.signer.message(control.recv_multipart())
                        answer = handler(message) if message is not None else None
                        if answer is not None:
                            control.send_multipart(self.signer.frames(answer))
                    if gone_since is not None and time.monotonic() - gone_since > KERNEL_GONE_S:
                        break
            except zmq.ZMQError:  # the context ended: the rank is closing
                gone_since = None
            monitor.close(0)
            control.close(0)  # before the stop: the rank's own close waits for every socket of its context
            if gone_since is not None:
                _end_rank(main, self.rank)

        self.control = threading.Thread(target=serve, name="jiyu-ranks-control", daemon=True)
        self.control.start()

    def hello(self, message: Message) -> None:
        """The first message, on the request socket: the kernel's ROUTER learns the route."""
        self.requests.send_multipart(self.signer.frames(message))

    def receive(self, timeout: float | None = None) -> Message | None:
        if timeout is not None and not self.requests.poll(int(timeout * 1000)):
            return None
        return self.signer.message(self.requests.recv_multipart())

    def send(self, message: Message) -> None:
        """From the sender thread only: ZMQ sockets belong to one thread."""
        self.replies.send_multipart(self.signer.frames(message), copy=False)

    def close(self) -> None:
        self.requests.close(0)
        self.replies.close()
        self.context.term()  # the control thread sees the context end and closes its socket


class SupervisorEnd:
    """The supervisor's side: a DEALER on the kernel's ROUTER, for its reports (a rank's exit)
    and the kernel's requests (start a replacement rank). Made after the first ranks are forked:
    a ZMQ context does not survive a fork, and the ranks make their own."""

    def __init__(self, address: Address):
        self.context = zmq.Context()
        self.signer = Signer(bytes.fromhex(address.key))
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, SUPERVISOR_IDENTITY)
        self.socket.setsockopt(zmq.LINGER, 2000)  # the last exit reports reach the kernel
        self.socket.connect(address.requests)

    def send(self, message: Message) -> None:
        self.socket.send_multipart(self.signer.frames(message))

    def receive(self) -> Message | None:
        """The next message, if one is waiting (the caller polls the socket)."""
        if not self.socket.poll(0):
            return None
        return self.signer.message(self.socket.recv_multipart())

    def close(self) -> None:
        self.socket.close()
        self.context.term()


def _from_source(source: str | None, endpoint: str) -> str:
    if source is None:
        return endpoint
    return f"tcp://{source}:0;{endpoint.removeprefix('tcp://')}"


def _end_rank(main: int, rank: int) -> None:
    print(f"jiyu: rank {rank}: its kernel is gone ({KERNEL_GONE_S:.0f} s without a connection); ending", flush=True)
    signal.pthread_kill(main, KERNEL_GONE_SIGNAL)
    time.sleep(EXIT_GRACE_S)
    os._exit(1)


def identity(rank: int) -> bytes:
    return f"rank{rank}".encode()


def control_identity(rank: int) -> bytes:
    return f"rank{rank}-control".encode()
