"""What the book keeper answers: one JSON object a line each way over its Unix socket.

A request is ``{"op": NAME, ...fields}``; a reply ``{"ok": true, ...}`` or ``{"ok": false,
"error": "one line", "rule": NAME}``. Each operation names its fields and their kinds here, and
anything else is refused. No field says who asks: the keeper takes the asker's uid and pid from
the connection (``SO_PEERCRED``), so a request that carries a ``uid``, ``user`` or ``pid`` is
refused with the reason rather than ignored.
"""

from __future__ import annotations

from typing import Any

MAX_LINE = 1 << 20  # bytes of one request: a few hundred kernels or GPUs fit many times over
IDENTITY_FIELDS = ("uid", "user", "pid", "gid")

_RUN = {
    "run": str,
    "kind": str,
    "gpus": int,
    "priority": int,
    "share": bool,
    "preemptible": bool,
    "queued": float,
    "block": float,  # seconds the keeper may wait for the queue to move before it answers
}
_RUN_OPTIONAL = {"priority", "share", "preemptible", "queued", "block"}
MAX_BLOCK_S = 5.0

# op -> (fields and kinds, the optional ones)
OPS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "whoami": ({}, set()),
    "wait": (_RUN, _RUN_OPTIONAL),
    "acquire": ({**_RUN, "slots": list}, _RUN_OPTIONAL),
    "record": ({"run": str, "kind": str, "slot": list}, set()),
    "release": ({"run": str}, set()),
    "requeue": ({"run": str}, set()),
    "top": ({"run": str}, set()),
    "check": ({"run": str}, set()),
    "owner": ({"run": str}, set()),
    "status": ({}, set()),
    "usage": ({"since": float}, set()),
    "changes": ({"limit": int}, {"limit"}),
    "kernels": ({"kernels": list}, set()),
    "reclaimed": ({"kernel_id": str}, set()),
    "idle": ({}, set()),
    "reclaim": ({"owner": str, "kernel": str}, set()),
}


class BadRequest(ValueError):
    """A request the keeper cannot read; ``str()`` is one line."""


def checked(request: Any) -> tuple[str, dict[str, Any]]:
    """The operation and its fields, checked against ``OPS``."""
    if not isinstance(request, dict):
        raise BadRequest("a request is a JSON object")
    op = request.get("op")
    if op not in OPS:
        raise BadRequest(f"unknown operation {op!r}")
    kinds, optional = OPS[op]
    fields = {k: v for k, v in request.items() if k != "op"}
    claimed = [k for k in fields if k in IDENTITY_FIELDS]
    if claimed:
        raise BadRequest(
            f"a request does not say who asks ({', '.join(claimed)}): the keeper takes that from the "
            "connection (SO_PEERCRED)"
        )
    unknown = [k for k in fields if k not in kinds]
    if unknown:
        raise BadRequest(f"{op}: unknown field(s) {', '.join(unknown)}")
    for name, kind in kinds.items():
        if name not in fields:
            if name not in optional:
                raise BadRequest(f"{op}: missing field {name!r}")
            continue
        value = fields[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            fields[name] = value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise BadRequest(f"{op}: {name} must be a {kind.__name__}")
    return op, fields
