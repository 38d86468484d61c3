"""The channel between a notebook kernel and the ranks of its pool: ZMQ, reachable by the
pool's own processes only.

The kernel binds two sockets: a ROUTER it sends requests on, one rank at a time by the rank's
identity (and the rank's control socket, and the supervisor), and a PULL it receives everything
on. Each rank connects a DEALER (it says hello on it, then only receives requests), a PUSH (its
sender thread's: output, displays, replies, in the order they were made) and a second DEALER, its
control socket, read by a thread of its own. A message is ``[header, *buffers]``: the header is
JSON, the buffers are pickles (pushed and pulled objects).

Who may connect is settled before any message is read, so what comes from anyone else costs
nothing (no frame of theirs is ever decoded):

- On the kernel's machine the sockets are Unix sockets (``ipc://``) in a folder only the kernel's
  user can enter (``mkdtemp``: 0700). Another local user cannot connect at all: no port to find,
  no handshake to flood, no frame to claim 8 GiB with.
- Ranks on other machines (a pool on a Slurm allocation, ``allocation``) reach the kernel over
  TCP, bound only once the allocation's nodes are known. ZMQ's own authentication (ZAP, pyzmq's
  ``ThreadAuthenticator``) lets in the allocation's node addresses only, and CurveZMQ admits the
  pool's own key only and encrypts every message; a handshake must finish within
  ``HANDSHAKE_MS``, and a frame over ``MAX_FRAME`` is refused before any memory is taken for it
  (bigger buffers travel in chunks). Each rank connects from its node's address (ZMQ's
  ``source;destination`` form).

The keys and endpoints are in the pool's address file (0600, in the run's private folder), never
in an environment variable. ZMQ queues what is sent before the other end connects, so no first
message is lost, and nothing here polls on a fixed period: the kernel waits on its sockets.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

from .protocol import Kind, Message
from .shared_files import SharedFolder

ZAP_DOMAIN = "jiyu-ranks"
MAX_FRAME = 64 * 2**20  # TCP: a bigger frame is refused before it is allocated (buffers go in chunks)
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
    """Where a pool's kernel listens: Unix socket paths, or TCP endpoints with the CurveZMQ keys
    (the kernel's public key, the pool's client key pair). Written to the pool's folder (0600)
    for its ranks."""

    requests: str  # the kernel's ROUTER (ranks connect DEALERs)
    replies: str  # the kernel's PULL (ranks connect a PUSH)
    server_key: str | None = None  # Z85 CurveZMQ keys: TCP only
    client_public: str | None = None
    client_secret: str | None = None
    shared: str | None = None  # the pool's folder in shared memory, for big buffers (``shared_files``)

    def save(self, path: Path) -> None:
        """Written whole, then renamed into place: a rank that waits for the file (on another
        node) never reads half of it."""
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(self), out)
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

    @property
    def ports(self) -> frozenset[int]:
        """The kernel's TCP ports (none for Unix sockets): a rank never cuts a connection to them."""
        return frozenset(int(e.rsplit(":", 1)[1]) for e in (self.requests, self.replies) if e.startswith("tcp://"))

    def client(self, sock: zmq.Socket) -> None:
        """A rank's or the supervisor's socket, made a CurveZMQ client where the kernel is one's server."""
        if self.server_key is None:
            return
        assert self.client_public is not None and self.client_secret is not None
        sock.curve_serverkey = self.server_key.encode()
        sock.curve_publickey = self.client_public.encode()
        sock.curve_secretkey = self.client_secret.encode()


def frames(message: Message, shared: SharedFolder | None = None) -> list:
    """``[header, *buffers]``; a big buffer goes through ``shared`` memory where there is some,
    else a buffer over ``MAX_FRAME`` goes as several frames (``chunks``)."""
    fields = {"kind": message.kind.value, **message.fields}
    buffers = shared.put(fields, message.buffers) if shared is not None else message.buffers
    parts: list = []
    if any(len(buffer) > MAX_FRAME for buffer in buffers):
        fields["chunks"] = [max(1, -(-len(b) // MAX_FRAME)) for b in buffers]
        for buffer in buffers:
            view = memoryview(buffer)
            parts.extend(view[i : i + MAX_FRAME] for i in range(0, max(1, len(view)), MAX_FRAME))
    else:
        parts = list(buffers)
    return [json.dumps(fields, default=str).encode(), *parts]


def _bytes(part) -> bytes:
    return part.bytes if isinstance(part, zmq.Frame) else bytes(part)


def message_of(parts: Sequence, shared: SharedFolder | None = None, unlink: bool = False) -> Message | None:
    """The message ``frames`` made, or None for frames that are not one (a peer of ours only
    sends messages; anything else is dropped). Its buffers in ``shared`` memory are mapped
    (``unlink``: and their files removed: they were written for this reader alone)."""
    try:
        fields = json.loads(_bytes(parts[0]))
        kind = Kind(fields.pop("kind"))
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    rest: list[Any] = [part.buffer if isinstance(part, zmq.Frame) else part for part in parts[1:]]  # not copied
    chunks = fields.pop("chunks", None)
    if chunks:
        buffers, at = [], 0
        for count in chunks:
            buffers.append(b"".join(rest[at : at + count]))
            at += count
        rest = buffers
    placed = fields.pop("shared", None)
    if placed and shared is not None:
        rest = shared.take(placed, rest, unlink)
    return Message(kind, fields, rest)


class KernelEnd:
    """The kernel's side: requests to a rank (its main thread, or its control thread), to the
    supervisor, and everything the ranks and the supervisor send, in one stream."""

    def __init__(self, host: str | None = None, allowed: Sequence[str] = ()) -> None:
        """Unix sockets in a private folder; or TCP on ``host``, letting in the pool's own key
        from the ``allowed`` addresses only (ranks on other machines)."""
        self.context = zmq.Context()
        self.authenticator: ThreadAuthenticator | None = None
        self.folder: str | None = None
        self.shared: SharedFolder | None = None
        keys: dict[str, str] = {}
        if host is None:
            self.folder = tempfile.mkdtemp(prefix="jiyu-pool-")  # 0700: its user's alone
            self.shared = SharedFolder.create()
        else:
            keys = self._curve(allowed)
        self.requests = self._socket(zmq.ROUTER, keys)
        self.requests.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a rank that is not connected is an error, not a drop
        self.replies = self._socket(zmq.PULL, keys)
        if self.folder is not None:
            endpoints = [f"ipc://{self.folder}/{name}" for name in ("requests", "replies")]
            self.requests.bind(endpoints[0])
            self.replies.bind(endpoints[1])
        else:
            endpoints = [
                f"tcp://{host}:{sock.bind_to_random_port(f'tcp://{host}')}" for sock in (self.requests, self.replies)
            ]
        self.address = replace(Address(*endpoints, **keys), shared=self.shared.path if self.shared else None)
        self.poller = zmq.Poller()
        self.poller.register(self.replies, zmq.POLLIN)
        self.poller.register(self.requests, zmq.POLLIN)

    def _curve(self, allowed: Sequence[str]) -> dict[str, str]:
        """The authenticator (these addresses, the pool's client key) and the keys: the kernel's
        secret stays here, the rest goes into the address file."""
        server_public, self._server_secret = zmq.curve_keypair()
        client_public, client_secret = zmq.curve_keypair()
        self.authenticator = ThreadAuthenticator(self.context)
        self.authenticator.start()
        self.authenticator.allow(*allowed)
        self.authenticator.configure_curve_callback(ZAP_DOMAIN, _OneKey(client_public))
        return {
            "server_key": server_public.decode(),
            "client_public": client_public.decode(),
            "client_secret": client_secret.decode(),
        }

    def _socket(self, kind: int, keys: dict[str, str]) -> zmq.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if keys:
            sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME + 2**16)
            sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
            sock.curve_server = True
            sock.curve_secretkey = self._server_secret
        return sock

    def send(self, rank: int, message: Message) -> bool:
        """A request to the rank's main thread; False when the rank is not connected (gone)."""
        return self._route(identity(rank), frames(message, self.shared))

    def broadcast(self, ranks: Sequence[int], message: Message) -> list[int]:
        """One request to several ranks, framed once (a push's buffers are not copied per
        rank, and a big one is written to shared memory once); the ranks it could not reach."""
        parts = frames(message, self.shared)
        return [rank for rank in ranks if not self._route(identity(rank), parts)]

    def control(self, rank: int, message: Message) -> bool:
        """To the rank's control thread (an interrupt, an abort, a question), which reads while
        the rank's main thread is busy or blocked; False when it is not connected."""
        return self._route(control_identity(rank), frames(message))

    def to_supervisor(self, message: Message) -> bool:
        return self._route(SUPERVISOR_IDENTITY, frames(message))

    def _route(self, to: bytes, parts: list) -> bool:
        try:
            self.requests.send_multipart([to, *parts], copy=False)
        except zmq.ZMQError:  # EHOSTUNREACH: that peer is gone (or not connected yet)
            return False
        return True

    def receive(self, timeout: float | None) -> Message | None:
        """The next message from a rank or the supervisor, or None when nothing came within
        ``timeout`` seconds (None: wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = dict(self.poller.poll(None if left is None else int(left * 1000)))
            if not ready:
                return None
            if self.replies in ready:
                message = message_of(self.replies.recv_multipart(copy=False), self.shared, unlink=True)
            else:  # on the ROUTER: [identity, header, ...] from a DEALER
                message = message_of(self.requests.recv_multipart(copy=False)[1:])
            if message is not None:
                return message
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def close(self) -> None:
        self.requests.close(0)
        self.replies.close(0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.shared is not None:
            self.shared.close()

    def written(self) -> list[str]:
        """The shared-memory files the requests sent since the last call wrote (removed once
        their request ended: ``remove_shared``)."""
        return self.shared.take_written() if self.shared is not None else []

    def remove_shared(self, names: list[str]) -> None:
        if self.shared is not None and names:
            self.shared.remove(names)


class _OneKey:
    """ZAP's CurveZMQ check: the pool's client key and no other."""

    def __init__(self, key: bytes):
        self.key = key

    def callback(self, domain: str, key: bytes) -> bool:
        return key in (self.key, z85.decode(self.key))  # pyzmq hands it over Z85-encoded


ControlHandler = Callable[[Message], "Message | None"]


class RankEnd:
    """A rank's side: requests in on the main thread, everything out through one sender, and a
    control thread for what must reach the rank while its main thread is busy."""

    def __init__(self, address: Address, rank: int, source: str | None = None):
        """``source``: the address to connect from (the node's own, which the kernel allows)."""
        self.context = zmq.Context()
        self.address, self.rank, self.source = address, rank, source
        self.shared = SharedFolder(address.shared, keep_names=False) if address.shared else None
        self.requests = self._socket(zmq.DEALER, identity(rank), linger=0)
        self.requests.connect(_from_source(source, address.requests))
        self.replies = self._socket(zmq.PUSH, None, linger=2000)  # the last replies reach the kernel before exit
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
        control = self._socket(zmq.DEALER, control_identity(self.rank), linger=0)
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
                        message = message_of(control.recv_multipart())
                        answer = handler(message) if message is not None else None
                        if answer is not None:
                            control.send_multipart(frames(answer))
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

    def _socket(self, kind: int, name: bytes | None, linger: int) -> zmq.Socket:
        sock = self.context.socket(kind)
        if name is not None:
            sock.setsockopt(zmq.IDENTITY, name)
        sock.setsockopt(zmq.LINGER, linger)
        self.address.client(sock)
        return sock

    def hello(self, message: Message) -> None:
        """The first message, on the request socket: the kernel's ROUTER learns the route."""
        self.requests.send_multipart(frames(message))

    def receive(self, timeout: float | None = None) -> Message | None:
        if timeout is not None and not self.requests.poll(int(timeout * 1000)):
            return None
        return message_of(self.requests.recv_multipart(copy=False), self.shared)

    def send(self, message: Message) -> None:
        """From the sender thread only: ZMQ sockets belong to one thread."""
        self.replies.send_multipart(frames(message, self.shared), copy=False)

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
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, SUPERVISOR_IDENTITY)
        self.socket.setsockopt(zmq.LINGER, 2000)  # the last exit reports reach the kernel
        address.client(self.socket)
        self.socket.connect(address.requests)

    def send(self, message: Message) -> None:
        self.socket.send_multipart(frames(message))

    def receive(self) -> Message | None:
        """The next message, if one is waiting (the caller polls the socket)."""
        if not self.socket.poll(0):
            return None
        return message_of(self.socket.recv_multipart())

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
