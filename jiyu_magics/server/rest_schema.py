"""The REST API as JSON Schema, generated from the Python types its replies are built with, so
it cannot fall behind them: each reply of ``/jiyu/api/...`` is a ``TypedDict`` that the code
building it constructs (``RECORDS`` names each one, by the name its schema and TypeScript type
have), the enums of ``core.runs.model``, each event kind's fields (``core.events.schema``), the
submission ``POST /jiyu/api/runs`` takes (from the declared submit options,
``jobs.submit_options``) and the body of a refusal (``ErrorReply``).

The panel's TypeScript types (``labextension/src/api.generated.ts``) are generated from it by
json-schema-to-typescript (``make api-types``); a test regenerates them and fails when the
committed file differs, and checks each route's real reply against its schema. Write the schema
with ``python -m jiyu_magics.server.rest_schema [FILE]``.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from ..core.events.checkpoints import RunCheckpoint
from ..core.events.fold import RunSummary
from ..core.events.log import Events
from ..core.events.schema import COMMON, FIELDS
from ..core.gpu.doctor import FindingJson
from ..core.gpu.snapshot import GpuDeviceJson, GpuLease, GpuProcessJson, ProcessOwnerJson
from ..core.options.option_spec import OptionSpec
from ..core.runs.model import ACTIVE, EventKind, RankState, RunKind, RunStatus
from ..core.store.run_row import RunGpu
from ..jobs.process.rank_records import RankRecordJson
from ..jobs.submit_options import SLURM, option_specs
from ..views.run_record import RunRecord
from ..views.stack_view import StackFrameJson, StackGroupJson
from .gpu_sampler import GpuKernel, GpuStatus
from .http_errors import ErrorReply
from .jobs_bridge import RankList
from .log_chunks import LogReply
from .run_views import EventChunk, RunCheckpoints, RunList, StackDump

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCALARS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}
ENUMS = (RunStatus, RunKind, EventKind, RankState)

# Every record of the API by its name in the schema, replies and their parts (the route that
# sends each is in its docstring); a TypedDict that one of them holds must be here too.
RECORDS: dict[str, Any] = {
    "RunSummary": RunSummary,
    "RunGpu": RunGpu,
    "RunCheckpoint": RunCheckpoint,
    "Run": RunRecord,
    "RunList": RunList,
    "EventChunk": EventChunk,
    "LogChunk": LogReply,
    "RankRecord": RankRecordJson,
    "RankList": RankList,
    "StackFrame": StackFrameJson,
    "StackGroup": StackGroupJson,
    "StackDump": StackDump,
    "RunCheckpoints": RunCheckpoints,
    "ProcessOwner": ProcessOwnerJson,
    "GpuLease": GpuLease,
    "GpuProcess": GpuProcessJson,
    "GpuDevice": GpuDeviceJson,
    "GpuKernel": GpuKernel,
    "Finding": FindingJson,
    "GpuStatus": GpuStatus,
    "ErrorReply": ErrorReply,
}


def api_schema() -> dict:
    """One document: ``$defs`` holds the enums, ``ActiveStatus`` (the statuses of a run that has
    not ended), ``Event``, every record of ``RECORDS`` and ``Submission`` (a request's body)."""
    defs: dict[str, dict[str, Any]] = {enum.__name__: {"type": "string", "enum": list(enum.values())} for enum in ENUMS}
    defs["ActiveStatus"] = {"type": "string", "enum": [status.value for status in ACTIVE]}
    defs["Event"] = {"oneOf": [_event(kind) for kind in EventKind]}
    defs.update({name: _record(record) for name, record in RECORDS.items()})
    defs["Submission"] = submission_schema()
    return {"$schema": SCHEMA_DIALECT, "title": "jiyu REST API", "$defs": defs}


def submission_schema() -> dict:
    """``POST /jiyu/api/runs``: the notebook (relative to the server root), its parameters as
    values or as the ``NAME = VALUE`` lines a person typed, and the submit options a request may
    set, with their bounds and choices (``jobs.submit_options``), the Slurm ones as one object."""
    specs = option_specs()
    slurm = {spec.name: _option(spec) for spec in specs if spec.backend == SLURM}
    properties = {
        "notebook": {"type": "string"},
        "params": {"type": "object", "additionalProperties": True},
        "param_lines": {"type": "array", "items": {"type": "string"}},
        **{spec.name: _option(spec) for spec in specs if spec.request},
        "slurm": {"type": "object", "properties": slurm, "additionalProperties": False},
    }
    return {
        "description": "The body of `POST /jiyu/api/runs`: a notebook under the server root, run as a background job.",
        "type": "object",
        "properties": properties,
        "required": ["notebook"],
        "additionalProperties": False,
    }


def _option(spec: OptionSpec) -> dict:
    schema: dict[str, Any] = {"type": "array", "items": {"type": "string"}} if spec.type is list else _schema(spec.type)
    if spec.bounds is not None:
        schema["minimum"], schema["maximum"] = spec.bounds
    if spec.choices is not None:
        schema["enum"] = list(spec.choices)
    return {"anyOf": [schema, {"type": "null"}]} if spec.default is None else schema


def _record(record: Any) -> dict:
    """Every key is always sent (``null`` for "not known") but the record's optional ones, and
    no other. Names a module imports for the type checker only resolve among ``RECORDS``."""
    hints = get_type_hints(record, localns={type_.__name__: type_ for type_ in RECORDS.values()})
    schema = {
        "type": "object",
        "properties": {name: _schema(hint) for name, hint in hints.items()},
        "required": [name for name in hints if name not in record.__optional_keys__],
        "additionalProperties": False,
    }
    if record.__doc__:  # the TypeScript type's doc comment
        schema = {"description": " ".join(inspect.cleandoc(record.__doc__).replace("``", "`").split()), **schema}
    return schema


def _event(kind: EventKind) -> dict:
    """An event of one kind: fields are left out when unknown, and undeclared ones may come."""
    properties = {name: _schema(hint | None) for name, hint in {**COMMON, **FIELDS[kind]}.items()}
    return {"type": "object", "properties": {"kind": {"const": kind.value}, **properties}, "required": ["kind"]}


def _schema(hint: Any) -> dict:
    if get_origin(hint) in (Union, types.UnionType):
        return {"anyOf": [_schema(option) for option in get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if get_origin(hint) is Literal:
        return {"type": "string", "enum": list(get_args(hint))}
    if hint is Events:
        return {"type": "array", "items": {"$ref": "#/$defs/Event"}}
    if get_origin(hint) is list:
        return {"type": "array", "items": _schema(get_args(hint)[0])}
    if get_origin(hint) is dict and get_args(hint)[1] is not Any:
        return {"type": "object", "additionalProperties": _schema(get_args(hint)[1])}
    if get_origin(hint) is dict or hint is dict:
        return {"type": "object", "additionalProperties": True}
    if isinstance(hint, type) and issubclass(hint, Enum):
        return {"$ref": f"#/$defs/{hint.__name__}"}
    if is_typeddict(hint):
        return {"$ref": f"#/$defs/{_name_of(hint)}"}
    return {"type": SCALARS[hint]}


def _name_of(record: Any) -> str:
    names = [name for name, known in RECORDS.items() if known is record]
    if not names:
        raise LookupError(f"{record.__name__} is part of a reply but not in rest_schema.RECORDS")
    return names[0]


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
