"""Writing a file at a path a user gave (``jiyu export -o``, ``jiyu plot -o``): only ever a
regular file.

Written whole (a temporary file beside it, then a rename), so a reader never sees half of it.
A rename would replace whatever has the name: a character device (``/dev/tty``) or a FIFO
would become a regular file, a symbolic link a file of its own where the user meant its
target. So a device, a FIFO, a socket or a folder is refused, and a symbolic link too unless
``follow_links`` (``--force``), which writes the link's target, a regular file or none yet.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotARegularFile(ValueError):
    """The path names something other than a regular file; ``str()`` is one line."""


def checked_target(path: str | os.PathLike, follow_links: bool = False) -> Path:
    """The file to write for ``path``: itself, or the target of a link when ``follow_links``."""
    path = Path(path).expanduser()
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    except OSError as error:
        raise NotARegularFile(f"{path}: {error.strerror or error}") from None
    if stat.S_ISLNK(mode):
        if not follow_links:
            raise NotARegularFile(f"{path} is a symbolic link; pass --force to write to its target")
        return checked_target(path.resolve(), follow_links=False)
    if not stat.S_ISREG(mode):
        raise NotARegularFile(f"{path} is {file_kind(mode)}, not a regular file; give a file path")
    return path


def write_regular_file(path: str | os.PathLike, data: bytes | str, follow_links: bool = False) -> Path:
    """``data`` written whole into the regular file at ``path`` (``checked_target``); returns
    the path written. ``NotARegularFile`` or ``OSError`` (a folder that does not exist, no
    permission, a full disk) otherwise, with nothing changed."""
    target = checked_target(path, follow_links)
    temp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        temp.unlink(missing_ok=True)  # a crashed writer's; "x" then never follows a link planted there
        with open(temp, "xb") as out:
            out.write(payload)
        if target.exists():
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, for a one-line refusal (``a device``)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"
