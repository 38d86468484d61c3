"""The REST API's run record and event log as JSON Schema, generated from the Python types they
are made of, so it cannot fall behind them: ``Run`` (the store's row, ``Run.to_dict``, with its
GPU leases, ``RunGpu``), the summary ``RunViews.record`` adds (``RunSummary``, the fold's),
the enums of ``core.runs.model`` and each event kind's fields (``core.event_model``).

The panel's TypeScript types (``labextension/src/types.ts``) are checked against it by a test:
a field renamed, added, dropped or made optional on either side fails there. Write it with
``python -m jiyu_magics.server.rest_schema [FILE]`` (``make api-schema``).
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import fields
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from ..core.events.fold import RunSummary
from ..core.events.schema import COMMON, FIELDS
from ..core.runs.model import EventKind, RunKind, RunStatus
from ..core.store.leases import RunGpu
from ..core.store.run_store import Run

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# keys a run record may leave out: the runs list sends no ``params`` (the run's own route does)
OPTIONAL_RUN_KEYS = ("params",)
SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object"}
ENUMS = (RunStatus, RunKind, EventKind)


def run_record_fields() -> dict[str, Any]:
    """Each key of a run as ``/jiyu/api/runs`` sends it, with its Python type: the row's
    fields, the ``duration`` that ``to_dict`` adds and the ``summary`` that ``record`` adds."""
    hints = get_type_hints(Run)
    record = {each.name: hints[each.name] for each in fields(Run)}
    record["duration"] = get_type_hints(Run.duration.fget)["return"]
    record["summary"] = RunSummary
    return record


def api_schema() -> dict:
    """One document: ``$defs`` holds ``Run``, ``RunSummary``, ``Event`` and the enums."""
    defs = {enum.__name__: {"type": "string", "enum": list(enum.values())} for enum in ENUMS}
    defs["RunSummary"] = _object(get_type_hints(RunSummary))
    defs["RunGpu"] = _object(get_type_hints(RunGpu))
    defs["Run"] = _object(run_record_fields(), optional=OPTIONAL_RUN_KEYS)
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
    if get_origin(hint) is dict:
        return {"type": "object"}
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
