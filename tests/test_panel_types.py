"""The panel's TypeScript types cannot drift from the Python side: ``labextension/src/
api.generated.ts`` is generated from the REST API's JSON Schema (itself generated from
``RunRecord``, ``RunSummary``, ``RunGpu``, the enums and the event fields) by
json-schema-to-typescript, and the test generates it again and compares; the TypeScript
compiler then checks every use of it (``make setup``'s build). The schema is checked against
what the real server sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from jiyu_magics.core.runs.model import ACTIVE, RunStatus
from jiyu_magics.server.rest_schema import api_schema

from .conftest import ROOT
from .server_fixtures import body, live_run, server_config, training_events

LABEXT = ROOT / "labextension"
GENERATED = LABEXT / "src" / "api.generated.ts"
NODE_MODULES = LABEXT / "node_modules"


@pytest.fixture
def jp_server_config():
    return server_config()


def generate(schema: dict, tmp_path: Path) -> str:
    """The TypeScript json-schema-to-typescript writes for ``schema``, as ``make api-types`` does."""
    if not (NODE_MODULES / "json-schema-to-typescript").is_dir():
        jlpm = Path(sys.executable).with_name("jlpm")
        env = {**os.environ, "PATH": os.pathsep.join([str(jlpm.parent), os.environ.get("PATH", "")])}
        installed = subprocess.run(
            [str(jlpm), "install", "--immutable"], cwd=LABEXT, env=env, capture_output=True, text=True, timeout=600
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
    source, out = tmp_path / "schema.json", tmp_path / "api.ts"
    source.write_text(json.dumps(schema))
    done = subprocess.run(
        ["node", "scripts/api-types.mjs", str(source), str(out)],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out.read_text()


def test_the_committed_types_are_what_the_schema_generates(tmp_path):
    assert GENERATED.read_text() == generate(api_schema(), tmp_path), "stale: run `make api-types`"


def test_a_change_on_the_python_side_changes_the_generated_types(tmp_path):
    """The check is real: a renamed field and a new status each show in the generated file."""
    schema = api_schema()
    run = schema["$defs"]["Run"]
    run["properties"]["exit_status"] = run["properties"].pop("exit_code")
    run["required"] = [("exit_status" if key == "exit_code" else key) for key in run["required"]]
    schema["$defs"]["RunStatus"]["enum"].append("paused")
    text = generate(schema, tmp_path)
    assert "exit_status: number | null;" in text and "exit_code:" not in text.split("export interface Run {")[1]
    assert "'paused'" in text and text != GENERATED.read_text()


def test_the_status_words_and_the_active_ones_are_the_enums():
    text = GENERATED.read_text()
    for status in RunStatus:
        assert f"'{status.value}'" in text.split("export type RunStatus =")[1].split(";")[0]
    active = text.split("export type ActiveStatus =")[1].split(";")[0]
    assert [word.strip(" '\n|") for word in active.split("|") if word.strip(" '\n|")] == [s.value for s in ACTIVE]


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
