"""Setting a box up and taking its keeper down: what ``jiyu box init`` and ``jiyu box stop`` do
(an admin once, or an image's entrypoint at each start).

``init`` makes the folder (group-owned and closed to others when the box has a group), writes
the policy from its template unless one is there, and starts the keeper detached, in a
session of its own with its log beside the book; it returns once the keeper answers. Run
again, it changes nothing that is there and starts the keeper only if none answers.
"""

from __future__ import annotations

import grp
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..processes.info import command_line, process_alive
from .client import BoxClient, BoxUnreachable
from .location import BoxLocation
from .policy import template

START_WAIT_S = 20.0


class BoxSetupError(RuntimeError):
    """``init`` or ``stop`` cannot do it; ``str()`` is one line with what to do."""


@dataclass
class Started:
    location: BoxLocation
    pid: int | None
    already: bool  # a keeper answered before: nothing was started


def init(path: Path, group: str | None = None) -> Started:
    location = BoxLocation(path.expanduser().absolute())
    gid = _gid(group)
    _make_folder(location.root, gid)
    if not location.policy.exists():
        location.policy.write_text(template(group))
        os.chmod(location.policy, 0o644)
    if answers(location):
        return Started(location, _pid(location), already=True)
    with open(location.log, "ab") as log:
        os.chmod(location.log, 0o600)
        keeper = subprocess.Popen(
            [sys.executable, "-m", "jiyu_magics", "box", "serve", "--path", str(location.root)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=location.root,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if keeper.poll() is not None:
            raise BoxSetupError(f"the book keeper exited at once (code {keeper.returncode}): see {location.log}")
        if answers(location):
            return Started(location, keeper.pid, already=False)
        time.sleep(0.05)
    raise BoxSetupError(f"the book keeper did not answer within {START_WAIT_S:.0f} s: see {location.log}")


def stop(path: Path, wait_s: float = 10.0) -> int | None:
    """Stops the box's keeper (SIGTERM; it removes its socket and pid file); its pid, or None
    when none ran. Only its own user (or root) may."""
    location = BoxLocation(path.expanduser().absolute())
    pid = _pid(location)
    if pid is None:
        return None
    if "box serve" not in (command_line(pid) or ""):
        location.pid_file.unlink(missing_ok=True)
        return None
    started = _start_time(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except PermissionError:
        raise BoxSetupError(f"the book keeper (pid {pid}) is not yours to stop: its admin stops it") from None
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + wait_s
    while process_alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid


def answers(location: BoxLocation) -> bool:
    try:
        BoxClient(location, timeout=2.0).call("whoami")
        return True
    except BoxUnreachable:
        return False


def _gid(group: str | None) -> int | None:
    if not group:
        return None
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise BoxSetupError(f"--group {group}: no such group on this machine (groupadd {group})") from None


def _make_folder(root: Path, gid: int | None) -> None:
    """The box's folder: reachable by the group's members only when there is a group (they
    need to reach the socket and read the policy), by everyone otherwise; writable by its
    owner alone."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if gid is not None:
            os.chown(root, -1, gid)
        os.chmod(root, 0o750 if gid is not None else 0o755)
    except OSError as error:
        raise BoxSetupError(f"{root} cannot be made ({error.strerror or error}): run jiyu box init as root") from None


def _pid(location: BoxLocation) -> int | None:
    try:
        return int(location.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _start_time(pid: int) -> float | None:
    from ..processes.info import process_start_time

    return process_start_time(pid)
