"""The panel's TypeScript types cannot drift from the Python side: ``labextension/src/types.ts``
is parsed and compared with the JSON Schema generated from ``Run``, ``RunSummary`` and the
enums (``jiyu_magics.server.rest_schema``), and that schema is checked against what the real
server sends."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from jiyu_magics.core.runs.model import ACTIVE, EventKind, RunKind, RunStatus
from jiyu_magics.server.rest_schema import api_schema

from .conftest import ROOT
from .server_fixtures import body, live_run, server_config, training_events
from .ts_types import SchemaTypes, TsTypes, disagreements

TYPES_TS = ROOT / "labextension" / "src" / "types.ts"
MIRRORED = ("Run", "RunSummary", "RunGpu")  # $defs/X is the panel's interface IX


@pytest.fixture
def jp_server_config():
    return server_config()


def all_disagreements(schema: dict, ts_text: str) -> list[str]:
    return [line for name in MIRRORED for line in disagreements(SchemaTypes(schema), TsTypes.parse(ts_text), name)]


def test_the_run_interfaces_match_the_python_schema():
    assert all_disagreements(api_schema(), TYPES_TS.read_text()) == []


def test_the_status_kind_and_event_unions_match_the_enums():
    ts = TsTypes.parse(TYPES_TS.read_text())
    for enum in (RunStatus, RunKind, EventKind):
        assert ts.literals(enum.__name__) == set(enum.values()), enum.__name__
    assert ts.array_literals("ACTIVE_STATUSES") == [status.value for status in ACTIVE]


def test_a_change_on_either_side_is_caught():
    """The check is real: a rename, an optional marker or a narrowed union in types.ts, and a
    renamed or retyped field in the Python schema, each show up as a disagreement."""
    text = TYPES_TS.read_text()
    edits = {
        "  exit_code: number | null;": "  exitCode: number | null;",
        "  val_acc: number | null;": "  val_acc?: number | null;",
        "| 'stopped' | 'lost';": "| 'stopped';",
    }  # the union as prettier writes it (one line)
    for old in edits:
        assert text.count(old) == 1, old
    assert all_disagreements(api_schema(), text.replace(*list(edits.items())[0])) == [
        "IRun.exitCode: only in types.ts",
        "IRun.exit_code: only in Python",
    ]
    assert all_disagreements(api_schema(), text.replace(*list(edits.items())[1])) == [
        "IRunSummary.val_acc: optional in types.ts only"
    ]
    narrowed = all_disagreements(api_schema(), text.replace(*list(edits.items())[2]))
    assert narrowed and all(line.startswith(("IRun.status:", "IRunSummary.end_status:")) for line in narrowed)

    schema = api_schema()
    run = schema["$defs"]["Run"]
    run["properties"]["exit_status"] = run["properties"].pop("exit_code")
    run["required"] = [("exit_status" if key == "exit_code" else key) for key in run["required"]]
    schema["$defs"]["RunSummary"]["properties"]["step"] = {"type": "string"}
    assert all_disagreements(schema, text) == [
        "IRun.exit_code: only in types.ts",
        "IRun.exit_status: only in Python",
        "IRunSummary.step: Python string, types.ts null | number",
    ]


def test_the_schema_module_writes_the_schema(tmp_path):
    out = tmp_path / "rest-api.schema.json"
    subprocess.run([sys.executable, "-m", "jiyu_magics.server.rest_schema", str(out)], cwd=ROOT, check=True)
    written = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(written)
    assert written == api_schema()


async def test_the_server_sends_what_the_schema_says(jp_fetch):
    """Every key of a real record (the row, ``duration``, ``summary``), nothing more, with the
    declared types; and every event of a real log is one of the declared kinds."""
    run = live_run("typed")
    files = training_events(run, steps=3, total=6)
    defs = api_schema()["$defs"]
    validate = lambda name, data: jsonschema.validate(data, {"$ref": f"#/$defs/{name}", "$defs": defs})  # noqa: E731
    (listed,) = body(await jp_fetch("jiyu", "api", "runs"))["runs"]
    validate("Run", listed)
    validate("Run", body(await jp_fetch("jiyu", "api", "runs", run.id)))
    events = body(await jp_fetch("jiyu", "api", "runs", run.id, "events", params={"offset": "0"}))["events"]
    for event in events:
        validate("Event", event)
    assert len(events) == 5 and files.events.exists()
    with pytest.raises(jsonschema.ValidationError):
        validate("Run", {**listed, "extra": 1})
