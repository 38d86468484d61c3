"""A free TCP port on the loopback interface, for the servers and rendezvous endpoints the
tests start (JupyterLab, sshd in the image, torchrun's c10d store)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just handed out; free unless another process takes it first."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
