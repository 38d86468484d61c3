"""The big buffers of a local pool's messages, as files in shared memory (``/dev/shm``).

A push of a 40 MB tensor to 8 ranks went through the channel 8 times (320 MB copied by the
kernel's sockets); written once into a file in shared memory, each rank maps it and copies it
once, in parallel. A pulled value comes back the same way. The folder is the pool's own
(``mkdtemp``: 0700, its user's alone); a file the kernel wrote for a request goes when the
request ends, one a rank wrote goes once the kernel mapped it, and the folder goes with the
pool (folders of kernels that died are swept when the next pool starts). A pool on other
machines has no shared memory with its kernel: its buffers stay in the messages.
"""

from __future__ import annotations

import mmap
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

SHARED_MEMORY = Path("/dev/shm")
MIN_BYTES = 1 << 20  # smaller buffers stay in the message: a file costs more than it saves
PREFIX = "jiyu-pool-"


class SharedFolder:
    def __init__(self, path: str, keep_names: bool = True):
        """``keep_names``: remember the files written, for their writer to remove (the kernel's
        requests); a rank's are removed by the kernel that reads them."""
        self.path, self.keep_names = path, keep_names
        self.written: list[str] = []  # files this process wrote since it last took them

    @classmethod
    def create(cls) -> SharedFolder | None:
        """A new folder for this kernel's pool, or None where there is no shared memory."""
        if not (SHARED_MEMORY.is_dir() and os.access(SHARED_MEMORY, os.W_OK)):
            return None
        _sweep()
        return cls(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=SHARED_MEMORY))

    def put(self, fields: dict[str, Any], buffers: list[Any]) -> list[Any]:
        """``buffers`` with each big one written to a file and left empty in the message; the
        files are named in ``fields["shared"]`` (buffer index → file name)."""
        shared: dict[str, str] = {}
        kept = []
        for index, buffer in enumerate(buffers):
            view = memoryview(buffer)
            if view.nbytes < MIN_BYTES:
                kept.append(buffer)
                continue
            name = secrets.token_hex(8)
            fd = os.open(os.path.join(self.path, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(view.cast("B"))
            shared[str(index)] = name
            if self.keep_names:
                self.written.append(name)
            kept.append(b"")
        if shared:
            fields["shared"] = shared
        return kept

    def take(self, shared: dict[str, str], buffers: list[Any], unlink: bool) -> list[Any]:
        """The buffers with the shared ones mapped from their files (read-only memory the
        receiver copies once); ``unlink``: the files are gone once mapped (a rank's reply)."""
        taken = list(buffers)
        for index, name in shared.items():
            path = os.path.join(self.path, os.path.basename(name))
            with open(path, "rb") as source:
                size = os.fstat(source.fileno()).st_size
                taken[int(index)] = memoryview(mmap.mmap(source.fileno(), size, prot=mmap.PROT_READ)) if size else b""
            if unlink:
                os.unlink(path)
        return taken

    def take_written(self) -> list[str]:
        written, self.written = self.written, []
        return written

    def remove(self, names: list[str]) -> None:
        for name in names:
            try:
                os.unlink(os.path.join(self.path, name))
            except FileNotFoundError:
                continue

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _sweep() -> None:
    """Folders left by this user's kernels that died (their pid, in the name, is gone)."""
    for folder in SHARED_MEMORY.glob(f"{PREFIX}*-*"):
        try:
            pid = int(folder.name.removeprefix(PREFIX).split("-", 1)[0])
            if folder.stat().st_uid != os.getuid() or _alive(pid):
                continue
        except (ValueError, OSError):
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
