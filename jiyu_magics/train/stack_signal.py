"""Every thread's Python stack on demand, for a rank that may be stuck.

A launched rank (one a run owner started: ``JIYU_RUN_ID`` is set) registers ``faulthandler`` on
``STACK_SIGNAL`` for the length of a ``fit`` call, writing into its own file in the run folder.
faulthandler writes from its C signal handler, so the stack comes even while the rank waits
inside a collective and never returns to Python; the loop itself pays nothing. Its owner
(``jobs.stack_dump``) sends the signal and reads what was appended.
"""

from __future__ import annotations

import contextlib
import faulthandler
import signal
from collections.abc import Iterator

from ..core.runs.files import STACK_SIGNAL_NAME, RunFiles


@contextlib.contextmanager
def stacks_on_signal(rank: int, run_id: str | None) -> Iterator[None]:
    """Registered while the body runs, in a launched rank only (``run_id``: the launcher's run,
    ``LaunchContext.run_id``): a kernel keeps its signals."""
    signum = getattr(signal, STACK_SIGNAL_NAME, None)
    if signum is None or not run_id:
        yield
        return
    path = RunFiles.of(run_id).stack_live(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as sink:  # append: the owner reads from the offset it saw before signalling
        faulthandler.register(signum, file=sink, all_threads=True, chain=False)
        try:
            yield
        finally:
            faulthandler.unregister(signum)
            signal.signal(signum, signal.SIG_IGN)  # a late request must not end the rank (the default)
