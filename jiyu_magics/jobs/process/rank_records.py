"""What each rank reports about itself: ``runs/<id>/ranks/<rank>.json``.

torchrun reaps its workers, so their exit codes are invisible to anyone else; the worker entry
point (``jobs.worker``) therefore writes its pid and the ``CUDA_VISIBLE_DEVICES`` it saw when it
starts and its exit code and one-line error when it ends. A rank killed by a signal never writes its end: its record still says
``running`` while its pid is gone, which is how we tell it was killed.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ...core.run_files import RunFiles
from ...core.run_store import process_alive


@dataclass
class RankRecord:
    rank: int
    local_rank: int
    pid: int
    restart: int = 0
    started: float = 0.0
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    cuda_visible_devices: str | None = None   # the GPUs this rank saw (its lease), None when unset

    @property
    def state(self) -> str:
        """running | exited | killed (gone without reporting: a signal or ``os._exit``)."""
        if self.ended is not None:
            return "exited"
        return "running" if process_alive(self.pid, self.started) else "killed"

    @property
    def failed(self) -> bool:
        return self.state == "killed" or bool(self.exit_code)

    def describe(self) -> str:
        if self.state == "exited":
            return f"rank {self.rank}: " + (self.error or f"exited with code {self.exit_code}")
        return f"rank {self.rank}: {self.state}"

    def to_dict(self) -> dict:
        return {**asdict(self), "state": self.state}


def ranks_dir(run_id: str) -> Path:
    return RunFiles.of(run_id).root / "ranks"


def write(run_id: str, record: RankRecord) -> None:
    """Whole-file replace, so a reader never sees half a record."""
    folder = ranks_dir(run_id)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{record.rank}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, folder / f"{record.rank}.json")


def read_all(run_id: str) -> list[RankRecord]:
    records = []
    for path in sorted(ranks_dir(run_id).glob("*.json")):
        try:
            records.append(RankRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return sorted(records, key=lambda r: r.rank)


def first_failure(records: list[RankRecord]) -> RankRecord | None:
    """The rank that failed first: the earliest error that was recorded (the others usually
    fail because it did: "connection closed by peer"), else a rank that was killed."""
    exited = sorted((r for r in records if r.ended is not None and r.exit_code), key=lambda r: r.ended)
    killed = [r for r in records if r.state == "killed"]
    return (exited or killed or [None])[0]
