"""Every thread's Python stack on demand, for a rank that may be stuck.

A launched rank (one a run owner started: ``JIYU_RUN_ID`` is set) registers ``faulthandler`` on
``STACK_SIGNAL`` for the length of a ``fit`` call, writing into its own file in the run folder.
faulthandler writes from its C signal handler, so the stack comes even while the rank waits
inside a collective and never returns to Python; the loop itself pays nothing. Its owner
(``jobs.stack_dump``) sends the signal and reads what was appended.

An owner on another machine (a Slurm job's follower on a login node, a notebook server) cannot
signal the rank, so the rank also watches ``stacks/request`` on the shared run folder: when an
owner writes a new request there, a thread here sends the signal to this rank's main thread (the stack wanted,
and the one faulthandler marks ``Current thread``). The thread needs the GIL to read that small
file once a second, which torch releases while it waits in a collective.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from ..core.runs.files import STACK_SIGNAL_NAME, RunFiles


@contextlib.contextmanager
def stacks_on_signal(rank: int, run_id: str | None) -> Iterator[None]:
    """Registered while the body runs, in a launched rank only (``run_id``: the launcher's run,
    ``LaunchContext.run_id``): a kernel keeps its signals."""
    signum = getattr(signal, STACK_SIGNAL_NAME, None)
    if signum is None or not run_id:
        yield
        return
    files = RunFiles.of(run_id)
    path = files.stack_live(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = threading.Event()
    with open(path, "a") as sink:  # append: the owner reads from the offset it saw before signalling
        faulthandler.register(signum, file=sink, all_threads=True, chain=False)
        watch = threading.Thread(
            target=_watch_requests, args=(files.stack_request, signum, done), name="jiyu-stack-requests", daemon=True
        )
        watch.start()
        try:
            yield
        finally:
            done.set()
            watch.join()
            faulthandler.unregister(signum)
            signal.signal(signum, signal.SIG_IGN)  # a late request must not end the rank (the default)


REQUEST_CHECK_S = 1.0


def serve_stack_requests(run_id: str, signum: int) -> threading.Event:
    """The request watch alone, for a process that keeps its own ``faulthandler`` registration
    (a ranks pool's rank, on an allocation's node: the kernel cannot signal it): set the event
    it returns to end it."""
    done = threading.Event()
    threading.Thread(
        target=_watch_requests,
        args=(RunFiles.of(run_id).stack_request, signum, done),
        name="jiyu-stack-requests",
        daemon=True,
    ).start()
    return done


def _watch_requests(request: Path, signum: int, done: threading.Event) -> None:
    """Signals the main thread each time ``request`` says something new after the watch began
    (its text is read, not its mtime: opening a file on NFS revalidates it, a ``stat`` may not)."""
    seen = _read(request)
    main = threading.main_thread().ident
    while main is not None and not done.wait(REQUEST_CHECK_S):
        now = _read(request)
        if now != seen:
            seen = now
            signal.pthread_kill(main, signum)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
