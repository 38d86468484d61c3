"""Let widget clicks reach a kernel whose main thread is busy running a cell.

ipykernel handles shell messages (a button's ``comm_msg`` included) on the main thread's event
loop, which a training cell blocks: a plain Stop button would only be "clicked" after training
ended. jupyter-ui-poll solved this for ipykernel 5/6 by calling ``kernel.do_one_iteration()``
from the cell; ipykernel 7 moved shell input to a shell-channel thread that forwards the main
shell's messages over an inproc socket, and dropped ``do_one_iteration``.

:class:`CommPump`, called from the busy cell between training steps (by wall clock, never per
step), drains that socket without blocking: ``comm_msg`` messages are handed to the kernel's
own comm handler right away (so ``on_click`` runs), and every other message (an
``execute_request`` for the next cell, ``kernel_info_request``...) is scheduled, in arrival
order, on the kernel's own dispatcher, where it runs after the current cell as it would have.
Outside a kernel, or on a kernel layout it does not know, the pump does nothing and the kernel
interrupt remains the way to stop.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
IMMEDIATE = frozenset({"comm_msg"})
Redispatch = Callable[[list], None]  # gives a message's frames back to the kernel's own dispatch


class CommPump:
    def __init__(self, kernel: Any = None):
        self.kernel = kernel if kernel is not None else current_kernel()
        self.stream = main_shell_stream(self.kernel) if self.kernel is not None else None
        self.redispatch = _redispatcher(self.kernel) if self.stream is not None else None
        self.handled = 0
        self.deferred = 0

    @property
    def active(self) -> bool:
        return self.redispatch is not None and threading.current_thread() is threading.main_thread()

    def __call__(self) -> int:
        """Handles the comm messages waiting now; returns how many."""
        stream, redispatch = self.stream, self.redispatch
        if stream is None or redispatch is None or not self.active:
            return 0
        import zmq

        handled, socket = 0, stream.socket
        while socket.poll(0, zmq.POLLIN):
            frames = socket.recv_multipart(copy=False)
            handled += self._route(frames, redispatch)
        return handled

    def _route(self, frames: list, redispatch: Redispatch) -> int:
        session = self.kernel.session
        idents, parts = session.feed_identities(frames, copy=False)
        header = session.deserialize(parts, content=False, copy=False)["header"]  # peek: no signature recorded
        if header.get("msg_type") not in IMMEDIATE:
            redispatch(frames)
            self.deferred += 1
            return 0
        message = session.deserialize(parts, content=True, copy=False)
        try:
            outcome = self.kernel.shell_handlers[header["msg_type"]](self.stream, idents, message)
            if inspect.isawaitable(outcome):
                self.kernel.io_loop.add_callback(lambda: outcome)
        except Exception:
            log.exception("a widget message raised while training")
        self.handled += 1
        return 1


def current_kernel() -> Any:
    try:
        from ipykernel.kernelbase import Kernel
    except ImportError:
        return None
    return Kernel.instance() if Kernel.initialized() else None


def main_shell_stream(kernel: Any) -> Any:
    """The ZMQ stream the main shell reads its messages from: the inproc socket the shell
    channel thread forwards to (ipykernel 7), or the shell socket itself (before 7)."""
    channel = getattr(kernel, "shell_channel_thread", None)
    if channel is not None:
        pair = channel.manager.get_shell_channel_to_subshell_pair(None)
        return getattr(pair, "to_stream", None)
    return getattr(kernel, "shell_stream", None)


def _redispatcher(kernel: Any) -> Redispatch | None:
    """How to give a message back to the kernel's normal dispatch, queued behind this cell."""
    if hasattr(kernel, "shell_main"):  # ipykernel 7
        return lambda frames: kernel.io_loop.add_callback(kernel.shell_main, None, frames)
    if hasattr(kernel, "schedule_dispatch"):  # ipykernel 6
        return lambda frames: kernel.schedule_dispatch(kernel.dispatch_shell, frames)
    return None
