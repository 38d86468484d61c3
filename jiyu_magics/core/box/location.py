"""Where a box's book lives, and whether this machine has one.

``jiyu box init`` makes a folder (default ``/var/lib/jiyu/box``) holding the keeper's socket,
its SQLite book (readable by the keeper alone), the admin's policy and the keeper's pid and
log. Every user's jiyu looks there without configuration; ``JIYU_BOX=DIR`` names another
folder (tests, several boxes on one machine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..settings import Settings

DEFAULT_PATH = Path("/var/lib/jiyu/box")


@dataclass(frozen=True)
class BoxLocation:
    root: Path

    @property
    def socket(self) -> Path:
        return self.root / "book.sock"

    @property
    def book(self) -> Path:
        return self.root / "book.sqlite"

    @property
    def policy(self) -> Path:
        return self.root / "policy.yaml"

    @property
    def pid_file(self) -> Path:
        return self.root / "keeper.pid"

    @property
    def log(self) -> Path:
        return self.root / "keeper.log"


def find(env: dict[str, str] | None = None) -> BoxLocation | None:
    """The box this process uses: ``JIYU_BOX`` when set (even before the folder exists: a run
    then waits for the book rather than leasing behind it), else the default folder when
    ``jiyu box init`` made one, else None."""
    raw = Settings.from_environ(env).box
    if raw:
        return BoxLocation(Path(raw).expanduser())
    default = BoxLocation(DEFAULT_PATH)
    return default if os.path.lexists(default.socket) or default.policy.exists() else None
