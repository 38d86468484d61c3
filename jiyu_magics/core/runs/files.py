"""Where jiyu keeps its state.

One home folder (``JIYU_HOME``, default ``~/.jiyu``) holds the SQLite run store and one folder
per run, so the kernel, background jobs, the CLI and the Jupyter server all find the same runs
without talking to each other.

All of it is private to its user: the home, ``runs/`` and each run's folder are made 0700 (a
run folder holds the notebook's code as ``job.py``, its logs and its checkpoints), the store
0600 (``core.store.database``), so another user of the machine reads none of it. A home that
exists already keeps its mode (``chmod 700 ~/.jiyu`` closes one an older jiyu made 0755); the
folders made in it from then on are private all the same.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..settings import HOME_ENV, Settings

# Set by a launcher (``%%train --nproc``, ``%submit``) for the processes it starts: training in
# those processes writes into that existing run instead of registering a new one.
RUN_ID_ENV = "JIYU_RUN_ID"
# The signal on which a launched rank writes every thread's Python stack into its
# ``stack_live`` file (SIGUSR1 is the scheduler's time limit, SIGTERM the stop).
STACK_SIGNAL_NAME = "SIGUSR2"
PRIVATE_FOLDER = 0o700  # the home, runs/ and each run's folder: their user's alone
PRIVATE_FILE = 0o600  # the run store


class StoreUnusable(RuntimeError):
    """The run store cannot be read or written. ``str()`` is one line with what to do; IPython
    shows just that line (no sqlite3 frames) wherever it surfaces."""

    def _render_traceback_(self) -> list[str]:
        return [f"StoreUnusable: {self}"]


def jiyu_home() -> Path:
    """The home folder, created on first use; read from the environment each call so tests
    and jobs can point a process at another home without re-importing."""
    home = Path(Settings.from_environ().home or Path.home() / ".jiyu").expanduser()
    try:
        private_folder(home, above=True)
    except OSError as error:  # a file of that name, a read-only or missing parent: one line, not a traceback
        raise StoreUnusable(
            f"the jiyu home folder {home} cannot be made ({error.strerror or error}): "
            f"set {HOME_ENV} to a folder you can write"
        ) from None
    return home


def private_folder(path: Path, above: bool = False) -> Path:
    """``path`` as a folder, each folder made for it on the way private (0700): a run folder's
    first maker (its registration, its ranks, a crash record) makes ``runs/`` too, and the home
    if it is gone. ``above``: the folders above ``path`` that are missing are made as any
    other's (``mkdir -p``), only ``path`` private (a home's)."""
    if above and not os.path.lexists(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_FOLDER)
        except FileExistsError:
            pass  # made by another process meanwhile
    if missing:
        path = missing[0]
    if not path.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(path))
    return path


def store_path(home: Path | None = None) -> Path:
    return (home or jiyu_home()) / "jiyu.sqlite"


def runs_root(home: Path | None = None) -> Path:
    return (home or jiyu_home()) / "runs"


def run_dir(run_id: str, home: Path | None = None) -> Path:
    """The folder of one run: ``job.py``, ``params.json``, ``stdout.log``, ``events.jsonl``,
    ``error.json`` and ``ckpt/``."""
    return runs_root(home) / run_id


class RunFiles:
    """The well-known files of a run folder, named once so every layer agrees on them."""

    def __init__(self, root: Path):
        self.root = Path(root)

    @classmethod
    def of(cls, run_id: str, home: Path | None = None) -> RunFiles:
        return cls(run_dir(run_id, home))

    def create(self) -> RunFiles:
        private_folder(self.ckpt)
        return self

    @property
    def script(self) -> Path:
        return self.root / "job.py"

    @property
    def line_map(self) -> Path:
        """``job.map.json``: the notebook cell and line of each line of ``job.py`` (``line_map``)."""
        return self.root / "job.map.json"

    @property
    def params(self) -> Path:
        return self.root / "params.json"

    @property
    def log(self) -> Path:
        return self.root / "stdout.log"

    @property
    def events(self) -> Path:
        return self.root / "events.jsonl"

    @property
    def error(self) -> Path:
        return self.root / "error.json"

    @property
    def ckpt(self) -> Path:
        return self.root / "ckpt"

    @property
    def stacks(self) -> Path:
        """``stacks/``: each rank's ``rank<N>.live`` (where its stack goes on ``STACK_SIGNAL``)
        and one ``<time>/rank<N>.txt`` folder per dump its owner took (``jobs.stack_dump``)."""
        return self.root / "stacks"

    def stack_live(self, rank: int) -> Path:
        return self.stacks / f"rank{rank}.live"

    @property
    def stack_request(self) -> Path:
        """``stacks/request``: written by an owner that cannot signal the ranks (they run on
        other machines); each rank watching it dumps its stack when it says something new."""
        return self.stacks / "request"

    @property
    def nodes(self) -> Path:
        """``nodes/``: each node of a multi-node job's ``<node>.json`` (its checks before
        torchrun, ``jobs.process.node_records``) and ``<node>.error.json`` (torchrun's failure)."""
        return self.root / "nodes"

    @property
    def trackers(self) -> Path:
        """Where the run's trackers hold it (``trackers.where``), as their followers found it."""
        return self.root / "trackers.json"

    @property
    def loss_plot(self) -> Path:
        """``loss.png``: left by whoever showed the run's summary (the engine draws nothing)."""
        return self.root / "loss.png"

    def write_loss_plot(self, png: bytes) -> Path:
        """Replaces ``loss.png`` atomically: a reader never sees half a file."""
        temp = self.loss_plot.with_name(f".loss.png.tmp-{os.getpid()}-{threading.get_ident()}")
        temp.write_bytes(png)
        os.replace(temp, self.loss_plot)
        return self.loss_plot
