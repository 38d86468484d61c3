"""Refusals with the message the user sees, and the one helper that turns them into replies.

Anything below a handler (validation, path resolution, the jobs bridge) raises a
``RequestError`` subclass; ``answers_errors`` on each verb makes it a JSON error reply with
that status. Nothing a client sends can produce a 500: a 500 means a bug on our side.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypedDict

from tornado import web

from ..core.store.database import StoreUnusable
from ..core.store.run_row import ForeignRun, UnknownRun


class _Message(TypedDict):
    message: str  # what the user sees: names the bad field and what was expected


class ErrorReply(_Message, total=False):
    """The body of every refusal (4xx, 503), as ``APIHandler.write_error`` writes it from the
    ``HTTPError`` raised here (or by Jupyter's own checks: a missing login is a 403)."""

    reason: str | None  # the HTTP reason phrase, when one was given
    traceback: str  # present (empty) for an unexpected error: a 500


class RequestError(Exception):
    """The request is malformed or asks for something impossible (400)."""

    status = 400


class Forbidden(RequestError):
    """The request is well formed but reaches for something it may not touch (403)."""

    status = 403


class Conflict(RequestError):
    """The run's state rules the action out (409), e.g. stopping an in-kernel run."""

    status = 409


class Unavailable(RequestError):
    """A feature this installation lacks (503)."""

    status = 503


Verb = Callable[..., Awaitable[Any]]


def answers_errors(verb: Verb) -> Verb:
    """Decorates a handler verb: ``RequestError`` → its status, another user's run → 403,
    ``UnknownRun`` → 404, an
    unusable run store → 503, each with
    ``{"message": ...}`` (``APIHandler.write_error`` writes the JSON, as for auth errors)."""

    @functools.wraps(verb)
    async def answer(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await verb(self, *args, **kwargs)
        except RequestError as error:
            raise web.HTTPError(error.status, str(error)) from None
        except ForeignRun as error:  # another user's run on a shared box: theirs alone
            raise web.HTTPError(403, str(error)) from None
        except UnknownRun as error:
            raise web.HTTPError(404, str(error)) from None
        except StoreUnusable as error:
            raise web.HTTPError(503, str(error)) from None

    return answer
