"""The book keeper: the one process that opens the box's book, answering every user's jiyu over
a Unix socket (``jiyu box serve``; ``jiyu box init`` starts it).

Who asks is the kernel's word: the peer credentials of the connection (``SO_PEERCRED``), read
when the connection is accepted. The socket's permissions keep out users outside the box's
group, and the keeper checks membership again (a socket made too open by hand lets nobody in).
The book file is the keeper's alone (mode 0600), so no user can write a row of it, and every
change it makes records the uid and pid that asked for it.

A request is one JSON line (``protocol``); each is answered on a thread of its own within a
time limit, so a client that connects and says nothing delays nobody else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import policy as policies
from .book import Book
from .book_rows import Refused
from .identity import Peer, in_group
from .location import BoxLocation
from .protocol import MAX_BLOCK_S, MAX_LINE, BadRequest, checked

REQUEST_TIMEOUT_S = 5.0  # to read a request; a blocking wait answers within MAX_BLOCK_S more
POLICY_CHECK_S = 1.0
RUN_ID = re.compile(r"^[0-9a-f]{1,32}$")


class PolicyFile:
    """The policy as last read, read again when the file changes (at most every second)."""

    def __init__(self, path: Path):
        self.path, self.current = path, policies.Policy()
        self._seen: tuple[float, int] | None = None
        self._checked = -float("inf")
        self._lock = threading.Lock()
        self.reload()

    def __call__(self) -> policies.Policy:
        if time.monotonic() - self._checked >= POLICY_CHECK_S:
            self.reload()
        return self.current

    def reload(self) -> None:
        with self._lock:
            self._checked = time.monotonic()
            try:
                info = os.stat(self.path)
                seen = (info.st_mtime, info.st_size)
            except OSError:
                seen = None
            if seen == self._seen and self.current.problem is None:
                return
            self._seen = seen
            self.current = policies.load(self.path, os.getuid(), self.current)
            if self.current.problem:
                say(f"policy: {self.current.problem}")


class Keeper:
    def __init__(self, location: BoxLocation):
        self.location = location
        self.policy = PolicyFile(location.policy)
        self.book = Book(location.book, self.policy)
        os.chmod(location.book, 0o600)

    def answer(self, peer: Peer, line: bytes) -> dict:
        """One request's reply; a refusal or a bad request is one line, never a traceback."""
        try:
            op, fields = checked(json.loads(line))
            policy = self.policy()
            if not in_group(peer.uid, policy.group):
                raise Refused(
                    f"{peer.user} is not in group {policy.group}: the box's GPUs are for its members "
                    "(ask its admin to add you)",
                    "group",
                )
            return {"ok": True, **self._dispatch(peer, op, fields)}
        except (ValueError, BadRequest) as error:  # JSON's errors are ValueErrors too
            return {"ok": False, "error": f"bad request: {error}", "rule": "request"}
        except Refused as refused:
            return {"ok": False, "error": str(refused), "rule": refused.rule}

    def _dispatch(self, peer: Peer, op: str, fields: dict[str, Any]) -> dict:
        book = self.book
        if "run" in fields and not RUN_ID.match(fields["run"]):
            raise BadRequest(f"run {fields['run']!r} is not a run id")
        if fields.get("gpus", 0) < 0:
            raise BadRequest("gpus must be 0 or more")
        handlers: dict[str, Callable[[], dict]] = {
            "whoami": lambda: {"uid": peer.uid, "user": peer.user, "pid": peer.pid},
            "wait": lambda: book.wait(peer, fields, _block(fields)),
            "acquire": lambda: book.acquire(peer, fields, _slots(fields.pop("slots")), _block(fields)),
            "record": lambda: book.record(peer, fields, _slots([fields.pop("slot")])[0]),
            "release": lambda: book.release(peer, fields["run"]),
            "requeue": lambda: book.requeue(peer, fields["run"]),
            "top": lambda: book.top(peer, fields["run"]),
            "check": lambda: book.check(peer, fields["run"]),
            "owner": lambda: book.owner(peer, fields["run"]),
            "status": lambda: book.status(peer),
            "usage": lambda: book.usage(peer, fields["since"]),
            "changes": lambda: book.changes(peer, fields.get("limit", 50)),
            "kernels": lambda: book.kernels.report(peer, _kernels(fields["kernels"])),
            "reclaimed": lambda: book.kernels.reclaimed(peer, fields["kernel_id"]),
            "idle": lambda: book.kernels.idle(peer),
            "reclaim": lambda: book.kernels.reclaim(peer, fields["owner"], fields["kernel"]),
        }
        return handlers[op]()


def _block(fields: dict[str, Any]) -> float:
    """How long a waiting owner lets the keeper hold its answer (at most ``MAX_BLOCK_S``)."""
    return min(max(float(fields.pop("block", 0.0)), 0.0), MAX_BLOCK_S)


def _slots(raw: list) -> list[tuple[str, int]]:
    slots = []
    for slot in raw:
        if not (isinstance(slot, list) and len(slot) == 2 and isinstance(slot[0], str) and isinstance(slot[1], int)):
            raise BadRequest("a GPU slot is [uuid, index]")
        slots.append((slot[0], slot[1]))
    if not slots:
        raise BadRequest("no GPU slot given")
    return slots


def _kernels(raw: list) -> list[dict]:
    kernels = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("kernel_id"), str):
            raise BadRequest("a kernel report is an object with a kernel_id")
        kernels.append(
            {
                "kernel_id": item["kernel_id"][:64],
                "gpus": [int(g) for g in item.get("gpus", []) if isinstance(g, int)],
                "memory": int(item.get("memory") or 0),
                "idle_s": float(item["idle_s"]) if isinstance(item.get("idle_s"), (int, float)) else None,
                "busy": bool(item.get("busy")),
            }
        )
    return kernels


class _Handler(socketserver.StreamRequestHandler):
    timeout = REQUEST_TIMEOUT_S
    server: _Server

    def handle(self) -> None:
        try:
            peer = Peer.of(self.connection)
            line = self.rfile.readline(MAX_LINE + 1)
        except OSError:
            return
        if not line:
            return
        if len(line) > MAX_LINE:
            reply: dict = {"ok": False, "error": "bad request: longer than 1 MiB", "rule": "request"}
        else:
            reply = self.server.keeper.answer(peer, line)
        try:
            self.wfile.write(json.dumps(reply, default=str).encode() + b"\n")
        except OSError:
            pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, keeper: Keeper, group: str | None):
        """Listening on ``path`` with its final mode and group (``open_socket``) from the first
        moment the path names it: bound under a temporary name, opened to ``group``, then
        renamed into place. A socket file at ``path`` that members may not open yet, even for a
        moment, would refuse a member's connection (EACCES: "you may not use the box's
        book"), and a job waiting for the keeper to come back would end there."""
        self.keeper = keeper
        for left in path.parent.glob(f".{path.name}.*"):  # a keeper killed while it started (one runs at a time)
            left.unlink(missing_ok=True)
        bound = path.with_name(f".{path.name}.{os.getpid()}")
        super().__init__(str(bound), _Handler, bind_and_activate=False)
        try:
            self.server_bind()
            open_socket(bound, group)
            self.server_activate()
            os.replace(bound, path)
        except BaseException:
            self.server_close()
            bound.unlink(missing_ok=True)
            raise


def serve(location: BoxLocation, group: str | None = None) -> int:
    """Runs the keeper until SIGTERM or SIGINT; its socket and pid file go with it."""
    refuse_second_keeper(location)
    os.umask(0o077)  # the book, its WAL and the socket are born private; the socket opens to the group below
    keeper = Keeper(location)
    server = _Server(location.socket, keeper, group or keeper.policy().group)
    location.pid_file.write_text(f"{os.getpid()}\n")
    os.chmod(location.pid_file, 0o644)
    stop = threading.Event()

    def on_signal(signum, frame) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    say(f"keeping the box's book {location.book} on {location.socket} (pid {os.getpid()})")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        location.socket.unlink(missing_ok=True)
        location.pid_file.unlink(missing_ok=True)
        keeper.book.close()
        say("stopped")
    return 0


def open_socket(path: Path, group: str | None) -> None:
    """The socket for the group's members (mode 0660, group-owned), or for every user."""
    if group:
        import grp

        os.chown(path, -1, grp.getgrnam(group).gr_gid)
        os.chmod(path, 0o660)
    else:
        os.chmod(path, 0o666)


def refuse_second_keeper(location: BoxLocation) -> None:
    """A socket that answers belongs to a keeper already running: one book, one keeper."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(location.socket))
    except OSError:
        return
    finally:
        probe.close()
    raise SystemExit(f"a book keeper already answers on {location.socket}")


def say(text: str) -> None:
    print(f"[jiyu box] {time.strftime('%Y-%m-%d %H:%M:%S')} {text}", file=sys.stdout, flush=True)
