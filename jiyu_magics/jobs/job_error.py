"""The one error type of the jobs layer that a person should read."""

from __future__ import annotations


class JobError(ValueError):
    """A user error (bad notebook, bad option, unknown run id). ``str(error)`` is one line,
    ready to show as a ``UsageError``, a CLI error (exit code 2) or an HTTP 400 message."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
