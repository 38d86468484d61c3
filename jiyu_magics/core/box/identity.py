"""Who a process is, as the kernel says: the peer credentials of a Unix socket connection
(``SO_PEERCRED``: pid, uid and gid, set by the kernel when the peer connected, so no request
can claim another user), and user and group names for people."""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
from dataclasses import dataclass

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int

    @property
    def user(self) -> str:
        return user_name(self.uid)

    @classmethod
    def of(cls, connection: socket.socket) -> Peer:
        pid, uid, gid = _CRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        return cls(pid, uid, gid)

    @classmethod
    def me(cls) -> Peer:
        return cls(os.getpid(), os.getuid(), os.getgid())


def user_name(uid: int) -> str:
    """The login name of ``uid``; its number when the system has no name for it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


def in_group(uid: int, group: str | None) -> bool:
    """Whether ``uid`` belongs to ``group`` (its primary group or a supplementary one); every
    user does when the box names no group."""
    if not group or uid == 0:
        return True
    try:
        entry = pwd.getpwuid(uid)
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        return False
    return gid in os.getgrouplist(entry.pw_name, entry.pw_gid)


def span(seconds: float) -> str:
    """``2 h``, ``12 min``, ``40 s``: how long a lease has been held, for people."""
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{max(seconds, 0):.0f} s"
