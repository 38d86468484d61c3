"""Asking the box's book keeper: one connection a request, one JSON line each way.

A keeper that does not answer is ``BoxUnreachable`` (a ``StoreUnusable``: the one-line error
every front-end shows already, and what run owners wait out); a request the rules refuse is
``BoxRefused``, whose text names the rule.
"""

from __future__ import annotations

import errno
import json
import socket
from typing import Any

from ..runs.files import StoreUnusable
from ..settings import BOX_ENV
from .location import BoxLocation

TIMEOUT_S = 10.0


class BoxUnreachable(StoreUnusable):
    """The keeper cannot be asked now: nothing is decided, nothing lost; ask again later."""


class BoxRefused(Exception):
    """The box's rules refuse the request; ``str()`` is one line, ``rule`` names the rule."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule

    def _render_traceback_(self) -> list[str]:
        return [f"BoxRefused: {self}"]


class BoxClient:
    def __init__(self, location: BoxLocation, timeout: float = TIMEOUT_S):
        self.location, self.timeout = location, timeout

    def call(self, op: str, **fields: Any) -> dict:
        request = json.dumps({"op": op, **fields}).encode() + b"\n"
        with self._connect() as connection:
            try:
                connection.sendall(request)
                reply = _read_line(connection)
            except OSError as error:
                raise self._unreachable(f"stopped answering ({error.strerror or error})") from None
        try:
            data: dict[str, Any] = json.loads(reply)
        except ValueError:
            raise self._unreachable("answered something that is not JSON") from None
        if not data.get("ok"):
            raise BoxRefused(str(data.get("error") or "refused"), str(data.get("rule") or ""))
        data.pop("ok")
        return data

    def _connect(self) -> socket.socket:
        path = self.location.socket
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(self.timeout)
        try:
            connection.connect(str(path))
        except OSError as error:
            connection.close()
            if error.errno in (errno.EACCES, errno.EPERM):
                raise BoxRefused(
                    f"you may not use the box's book ({path}: {error.strerror}); ask its admin to add you to its group",
                    "group",
                ) from None
            if error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
                raise self._unreachable("is not running") from None
            raise self._unreachable(f"cannot be reached ({error.strerror or error})") from None
        return connection

    def _unreachable(self, what: str) -> BoxUnreachable:
        return BoxUnreachable(
            f"the box's book keeper ({self.location.socket}) {what}: GPU runs wait until it answers "
            f"(an admin starts it with `jiyu box init --path {self.location.root}`; {BOX_ENV} names another box)"
        )


def _read_line(connection: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    if not chunks:
        raise OSError(errno.ECONNRESET, "closed without a reply")
    return b"".join(chunks)
