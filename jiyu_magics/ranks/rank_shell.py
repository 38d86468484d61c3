"""What a rank's shell shows goes to its kernel as the kernel's own shell would show it: rich
displays (``display(...)``, matplotlib figures, a cell's last expression) as MIME bundles, and
a failing cell's traceback as IPython formatted it, over the pool's channel instead of to a
terminal. ipykernel does the same for a kernel's front-end (its ZMQ display publisher and
display hook); this is the part of that a rank needs.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import TracebackType
from typing import Any, Protocol

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from .protocol import Kind, Message


class Outbox(Protocol):
    def put(self, message: Message) -> None: ...


class Worker(Protocol):
    """What the display forwarding needs of a rank (``ranks_worker.Worker``). Read-only: the
    forwarding never sets them, and a worker's ``Sender`` is an ``Outbox`` only when read."""

    @property
    def rank(self) -> int: ...

    @property
    def request(self) -> str | None: ...

    @property
    def sender(self) -> Outbox: ...

    def collective_aborted(self) -> bool: ...


class RankShell(InteractiveShell):
    """A rank's shell: no terminal and no GUI event loop to integrate with, so matplotlib's
    inline backend (which draws figures as PNG displays) needs nothing more from it."""

    def enable_gui(self, gui=None):
        return None

    collateral: Any = None  # a callable: whether an error now is an aborted collective's (``forward_displays``)

    def showtraceback(
        self, exc_tuple=None, filename=None, tb_offset=None, exception_only=False, running_compiled_code=False
    ):
        """An error that is only its aborted collective's ("Connection closed by peer", after a
        peer failed) goes out as one line, unformatted: formatting seven ranks' tracebacks that
        nobody is shown took seconds on a busy machine and delayed the cell's end."""
        if self.collateral is not None and (self.collateral() or _stopping(exc_tuple)):
            try:
                etype, value, _ = self._get_exc_info(exc_tuple)
            except ValueError:
                return
            self._showtraceback(etype, value, [f"{etype.__name__}: {value}"])
            return
        super().showtraceback(exc_tuple, filename, tb_offset, exception_only, running_compiled_code)

    def _get_exc_info(self, exc_tuple=None):
        """The error to show, without the frame of the rank's SIGINT handler where an interrupt
        raised its ``KeyboardInterrupt``: the traceback ends in the cell that was interrupted."""
        etype, value, tb = super()._get_exc_info(exc_tuple)
        return etype, value, _without_frames(tb, HANDLER_FRAMES)


INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def _stopping(exc_tuple) -> bool:
    """A stop's SystemExit (``core.processes.job_stop``): one line, then the rank ends."""
    error = exc_tuple[1] if exc_tuple else sys.exc_info()[1]
    return isinstance(error, SystemExit)


HANDLER_FRAMES = frozenset({"_on_interrupt"})  # ``worker.Worker._on_interrupt``


def _without_frames(tb: TracebackType | None, names: frozenset[str]) -> TracebackType | None:
    """``tb`` with the entries of functions named ``names`` (in this package) unlinked."""
    head, previous, entry = tb, None, tb
    while entry is not None:
        code = entry.tb_frame.f_code
        if code.co_name in names and "jiyu_magics" in code.co_filename:
            if previous is None:
                head = entry.tb_next
            else:
                previous.tb_next = entry.tb_next
        else:
            previous = entry
        entry = entry.tb_next
    return head


def prepared_shell() -> RankShell:
    """The rank's shell with ``jiyu_magics`` loaded (so ``%%train`` and ``fit`` work in a cell)
    and matplotlib's inline backend on. In/Out are kept in memory only: every rank writing one
    history file made each cell wait ~40 ms on SQLite's lock (found with py-spy on a no-op
    cell). Made once; a rank forked by the supervisor finds it made."""
    if RankShell.initialized():
        return RankShell.instance()
    config = Config()
    config.HistoryManager.enabled = False
    shell = RankShell.instance(config=config)
    assert shell.extension_manager is not None
    shell.extension_manager.load_extension("jiyu_magics")
    # matplotlib's inline backend as ipykernel sets it: chosen when a cell imports pyplot, which
    # then hooks itself into this shell (importing it here took a second of every pool's start)
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    # a stop ends the rank (its SystemExit leaves the cell), where a terminal would say how to exit
    warnings.filterwarnings("ignore", message="To exit: use 'exit', 'quit', or Ctrl-D.")
    _warm_tracebacks(shell)
    return shell


def _warm_tracebacks(shell: InteractiveShell) -> None:
    """Formats one traceback, so the first failing cell of each rank does not pay for what
    IPython's formatter imports and caches on first use (a third of a second)."""
    try:
        raise ValueError("warming the traceback formatter")
    except ValueError:
        shell.InteractiveTB.structured_traceback(*sys.exc_info())


class ForwardingPublisher(DisplayPublisher):
    """``display()`` in a rank: the bundle, to the kernel."""

    def __init__(self, worker: Worker, **kwargs: Any):
        super().__init__(**kwargs)
        self.worker = worker

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs) -> None:
        self.worker.sender.put(_display(self.worker, data, metadata, result=False))

    def clear_output(self, wait: bool = False) -> None:
        pass


class ForwardingDisplayHook(DisplayHook):
    """A cell's last expression in a rank: its bundle, to the kernel (no ``Out[n]:`` prompt)."""

    def __init__(self, worker: Worker, **kwargs: Any):
        super().__init__(**kwargs)
        self.worker = worker

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict, md_dict=None) -> None:
        self.worker.sender.put(_display(self.worker, format_dict, md_dict, result=True))


def _display(worker: Worker, data: dict, metadata: dict | None, result: bool) -> Message:
    fields = {"request": worker.request, "rank": worker.rank, "data": data, "metadata": metadata or {}}
    return Message(Kind.DISPLAY, {**fields, "result": result})


def forward_displays(shell, worker: Worker) -> None:
    """Rich output and tracebacks of ``shell`` go to the kernel; the traceback also to the
    rank's own stderr (the run's log)."""
    shell.display_pub = ForwardingPublisher(worker, shell=shell, parent=shell)
    shell.displayhook = ForwardingDisplayHook(worker, shell=shell, cache_size=shell.cache_size, parent=shell)
    shell.display_trap.hook = shell.displayhook  # what run_cell installs as sys.displayhook
    shell.collateral = worker.collective_aborted

    def show_traceback(etype, evalue, stb: list[str]) -> None:
        if sys.__stderr__ is not None:
            sys.__stderr__.write(shell.InteractiveTB.stb2text(stb) + "\n")
        worker.sender.put(
            Message(
                Kind.ERROR,
                {
                    "request": worker.request,
                    "rank": worker.rank,
                    "ename": getattr(etype, "__name__", str(etype)),
                    "evalue": str(evalue),
                    "traceback": list(stb),
                },
            )
        )

    shell._showtraceback = show_traceback
