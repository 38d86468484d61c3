"""The REST API's run record and event log as JSON Schema, generated from the Python types they
are made of, so it cannot fall behind them: ``RunRecord`` (``views.run_record``: what a client
gets of a run, with the GPU leases ``RunGpu`` and the progress ``RunSummary``), the enums of
``core.runs.model`` and each event kind's fields (``core.events.schema``).

The panel's TypeScript types (``labextension/src/api.generated.ts``) are generated from it by
json-schema-to-typescript (``make api-types``); a test regenerates them and fails when the
committed file differs. Write the schema with ``python -m jiyu_magics.server.rest_schema [FILE]``.
"""

from __future__ import annotations

import json
import sys
import types
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from ..core.events.checkpoints import RunCheckpoint
from ..core.events.fold import RunSummary
from ..core.events.schema import COMMON, FIELDS
from ..core.runs.model import ACTIVE, EventKind, RunKind, RunStatus
from ..core.store.run_row import RunGpu
from ..views.run_record import OPTIONAL_KEYS, RunRecord

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}
ENUMS = (RunStatus, RunKind, EventKind)


def api_schema() -> dict:
    """One document: ``$defs`` holds ``Run``, ``RunSummary``, ``Event``, the enums and
    ``ActiveStatus`` (the statuses of a run that has not ended) and ``RunCheckpoint`` (one
    checkpoint on disk, of ``GET .../checkpoints``)."""
    defs: dict[str, dict[str, Any]] = {enum.__name__: {"type": "string", "enum": list(enum.values())} for enum in ENUMS}
    defs["ActiveStatus"] = {"type": "string", "enum": [status.value for status in ACTIVE]}
    defs["RunSummary"] = _object(get_type_hints(RunSummary))
    defs["RunGpu"] = _object(get_type_hints(RunGpu))
    defs["RunCheckpoint"] = _object(get_type_hints(RunCheckpoint))
    defs["Run"] = _object(get_type_hints(RunRecord), optional=OPTIONAL_KEYS)
    defs["Event"] = {"oneOf": [_event(kind) for kind in EventKind]}
    return {"$schema": SCHEMA_DIALECT, "title": "jiyu REST API", "$defs": defs}


def _object(properties: dict[str, Any], optional: tuple[str, ...] = ()) -> dict:
    """Every key is always sent (``null`` for "not known") but the ``optional`` ones, and no other."""
    return {
        "type": "object",
        "properties": {name: _schema(hint) for name, hint in properties.items()},
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def _event(kind: EventKind) -> dict:
    """An event of one kind: fields are left out when unknown, and undeclared ones may come."""
    properties = {name: _schema(hint | None) for name, hint in {**COMMON, **FIELDS[kind]}.items()}
    return {"type": "object", "properties": {"kind": {"const": kind.value}, **properties}, "required": ["kind"]}


def _schema(hint: Any) -> dict:
    if get_origin(hint) in (Union, types.UnionType):
        return {"anyOf": [_schema(option) for option in get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if get_origin(hint) is list:
        return {"type": "array", "items": _schema(get_args(hint)[0])}
    if get_origin(hint) is dict or hint is dict:
        return {"type": "object", "additionalProperties": True}
    if isinstance(hint, type) and issubclass(hint, Enum) or is_typeddict(hint):
        return {"$ref": f"#/$defs/{hint.__name__}"}
    return {"type": SCALARS[hint]}


def main(argv: list[str]) -> int:
    text = json.dumps(api_schema(), indent=2) + "\n"
    if argv:
        with open(argv[0], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
