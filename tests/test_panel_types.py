"""The panel's TypeScript types cannot drift from the Python side: ``labextension/src/
api.generated.ts`` is generated from the REST API's JSON Schema (itself generated from the
TypedDicts each reply is built with, the enums, the event fields, the declared submit options
and the refusal body) by json-schema-to-typescript, and the test generates it again and
compares; the TypeScript compiler then checks every use of it (``make setup``'s build). Each
route the panel calls is checked against its schema with what the real server sends, and no
hand-written TypeScript interface may declare a REST payload again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from tornado.httpclient import HTTPClientError

from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import ACTIVE, RunStatus
from jiyu_magics.core.store.leases import GpuSlot
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.process.rank_records import RankRecord
from jiyu_magics.jobs.process.rank_records import write as write_rank_record
from jiyu_magics.server.handlers import ROUTES
from jiyu_magics.server.rest_schema import api_schema

from .conftest import ROOT
from .gpu_box import GIB, configure, uuid_of
from .server_fixtures import body, ended_run, follows_schema, live_run, server_config, training_events

LABEXT = ROOT / "labextension"
GENERATED = LABEXT / "src" / "api.generated.ts"
NODE_MODULES = LABEXT / "node_modules"
# What each route the panel calls answers, by its schema's name (a new route needs its entry)
REPLIES = {
    "/jiyu/api/gpus": "GpuStatus",
    "/jiyu/api/runs": "RunList",  # POST: the submitted Run
    "/jiyu/api/runs/{id}": "Run",
    "/jiyu/api/runs/{id}/events": "EventChunk",
    "/jiyu/api/runs/{id}/log": "LogChunk",
    "/jiyu/api/runs/{id}/stacks": "StackDump",
    "/jiyu/api/runs/{id}/ranks": "RankList",
    "/jiyu/api/runs/{id}/checkpoints": "RunCheckpoints",
    "/jiyu/api/runs/{id}/stop": "Run",
}
# The front-end's own shapes: props, chart geometry, folded histories, the dialog's fields.
# Nothing the server sends or takes: those come from api.generated.ts.
UI_TYPES = {
    "IPoint",
    "ISeries",
    "IBox",
    "IScales",
    "ICompared",
    "ICompareRow",
    "ICompareLayout",
    "IAncestor",
    "IPanelModelOptions",
    "ISubmitValues",
    "IRunHistory",
    "IParent",
    "ISparkline",
    "IRunView",
    "IRunActions",
    "ISelection",
    "IPanelBodyProps",
    "IMeterProps",
    "IRunListProps",
    "IChartOptions",
    "IKernelActions",
}


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
    run_type = text.split("export interface Run {")[1].split("\n}")[0]
    assert "exit_status: number | null;" in run_type and "exit_code:" not in run_type
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


# -- every route the panel calls, as the real server answers it ------------------------------


def test_every_route_the_panel_calls_has_a_typed_reply():
    routes = {pattern.replace("(?P<run_id>[^/]+)", "{id}") for pattern, _ in ROUTES if "/api/" in pattern}
    assert routes == set(REPLIES), "a route without a typed reply: add its TypedDict to rest_schema.RECORDS"
    assert set(REPLIES.values()) <= set(api_schema()["$defs"])


def typed_run(home: Path) -> str:
    """A running run with everything the run page reads: events with a kept and a rotated
    checkpoint, a log, two rank records and a stack dump."""
    run = live_run("typed")
    files = training_events(run, steps=3, total=6)
    kept = home / "ckpt-3.pt"
    kept.write_bytes(b"weights")
    with EventLog(files.events) as log:
        log.append("ckpt", step=2, path=str(home / "ckpt-2.pt"))  # rotated out
        log.append("ckpt", step=3, path=str(kept))
    files.log.write_text("epoch 1 of 2\n")
    pid = os.getpid()
    write_rank_record(run.id, RankRecord(rank=0, local_rank=0, pid=pid, started=process_start_time(pid) or 0.0))
    write_rank_record(run.id, RankRecord(rank=1, local_rank=1, pid=pid, ended=1.0, exit_code=1, error="boom"))
    dump = RunFiles.of(run.id).stacks / "20261201T020000"
    dump.mkdir(parents=True)
    (dump / "rank0.txt").write_text(
        "Current thread 0x00007f02 (most recent call first):\n"
        '  File "/runs/a/job.py", line 17 in train_step\n'
        '  File "/runs/a/job.py", line 41 in <module>\n'
    )
    return run.id


async def test_each_reply_is_what_its_schema_says(nvml_double, jp_fetch, tmp_path, monkeypatch):
    """With GPUs leased, held by a run and by a pid outside this container, and a run that has
    everything the run page shows: each route's real reply, and none of them empty."""
    box = configure(monkeypatch, tmp_path, 2)
    run_id = typed_run(tmp_path)
    RunStore().leases.record(run_id, GpuSlot(uuid_of(1), 1))
    box.hold(0, os.getpid(), GIB)  # the run's own process (live_run records this pid)
    box.hold_from_host(1, 999_999, GIB)
    finished = ended_run()

    async def reply(name: str, *path: str, **fetch) -> dict:
        data = body(await jp_fetch("jiyu", "api", *path, **fetch))
        follows_schema(name, data)
        return data

    gpus = await reply("GpuStatus", "gpus")
    owners = {p["owner"]["kind"] for d in gpus["devices"] for p in d["processes"]}
    assert owners == {"run", "outside"} and gpus["devices"][1]["leases"][0]["run_id"] == run_id
    assert len((await reply("RunList", "runs"))["runs"]) == 2
    assert (await reply("Run", "runs", run_id))["params"] == {}
    assert len((await reply("EventChunk", "runs", run_id, "events", params={"offset": "0"}))["events"]) == 7
    assert (await reply("LogChunk", "runs", run_id, "log"))["text"] == "epoch 1 of 2\n"
    assert [r["state"] for r in (await reply("RankList", "runs", run_id, "ranks"))["ranks"]] == ["running", "exited"]
    assert (await reply("StackDump", "runs", run_id, "stacks"))["groups"][0]["frames"][0]["func"] == "train_step"
    assert (await reply("RunCheckpoints", "runs", run_id, "checkpoints"))["rotated"] == 1
    assert (await reply("Run", "runs", finished.id, "stop", method="POST", body=b""))["status"] == "succeeded"


@pytest.mark.driverless
async def test_gpus_without_a_driver_are_what_the_schema_says(jp_fetch):
    snap = body(await jp_fetch("jiyu", "api", "gpus"))
    follows_schema("GpuStatus", snap)
    follows_schema("Finding", snap["doctor"])


async def refusal(call) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as caught:
        await call
    return caught.value.code, json.loads(caught.value.response.body)


async def test_a_refusal_is_what_the_schema_says(jp_fetch):
    code, data = await refusal(jp_fetch("jiyu", "api", "runs", "nosuchrun"))
    follows_schema("ErrorReply", data)
    code_400, data_400 = await refusal(jp_fetch("jiyu", "api", "runs", method="POST", body=b"[1]"))
    follows_schema("ErrorReply", data_400)
    assert (code, code_400) == (404, 400) and "JSON object" in data_400["message"]


# -- the submission ----------------------------------------------------------------------------


def test_the_submission_schema_takes_what_the_dialog_sends_and_refuses_the_rest():
    follows_schema("Submission", {"notebook": "train.ipynb", "nproc": 2, "param_lines": ["lr = 3e-4"], "name": "a"})
    follows_schema("Submission", {"notebook": "t.ipynb", "backend": "slurm", "slurm": {"time": "1:00:00"}})
    for bad in (
        {"nproc": 2},  # no notebook
        {"notebook": "t.ipynb", "nprocs": 2},
        {"notebook": "t.ipynb", "nproc": 0},
        {"notebook": "t.ipynb", "nproc": "2"},
        {"notebook": "t.ipynb", "backend": "ssh"},
        {"notebook": "t.ipynb", "slurm": {"tim": "1:00:00"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            follows_schema("Submission", bad)


def example(schema: dict):
    """A value the schema takes: its first choice, its lowest bound, or the type's simplest."""
    if "anyOf" in schema:
        return example(schema["anyOf"][0])
    if "enum" in schema:
        return schema["enum"][0]
    simple = {"string": "x", "number": 1.0, "boolean": False, "array": [], "object": {}}
    return schema.get("minimum", 1) if schema["type"] == "integer" else simple[schema["type"]]


SUBMISSION_FIELDS = [
    name
    for name in api_schema()["$defs"]["Submission"]["properties"]
    if name != "notebook"  # in every body below
]


@pytest.mark.parametrize("name", SUBMISSION_FIELDS)
async def test_the_server_takes_every_field_the_submission_schema_declares(jp_fetch, name):
    """A body with the field passes the server's field checks (it fails only on the notebook,
    which is not there): the schema declares no field the server refuses as unknown."""
    schema = api_schema()["$defs"]["Submission"]
    submission = {"notebook": "missing.ipynb", name: example(schema["properties"][name])}
    follows_schema("Submission", submission)
    code, data = await refusal(jp_fetch("jiyu", "api", "runs", method="POST", body=json.dumps(submission)))
    follows_schema("ErrorReply", data)
    assert (code, "no notebook at" in data["message"]) == (400, True), data


# -- no hand-written REST payload in the TypeScript --------------------------------------------


def declared_types(source: str) -> dict[str, set[str] | None]:
    """Each interface or object type a TypeScript source declares, with its own property names
    (not those of nested objects); None for another kind of type (a union, a ``Pick<...>``)."""
    found: dict[str, set[str] | None] = {}
    for match in re.finditer(r"^\s*(?:export\s+)?(?:interface\s+(\w+)[^{=]*\{|type\s+(\w+)\s*=)", source, re.M):
        name = match.group(1) or match.group(2)
        rest = source[match.end() :]
        if match.group(2):  # a type alias: its object literal, if it is one
            stripped = rest.lstrip()
            if not stripped.startswith("{"):
                found[name] = None
                continue
            rest = stripped[1:]
        depth, props = 1, set()
        for line in rest.splitlines():
            if depth == 1 and (prop := re.match(r"\s*(?:readonly\s+)?(\w+)\??\s*[:(]", line)):
                props.add(prop.group(1))
            depth += line.count("{") - line.count("}")
            if depth <= 0:
                break
        found[name] = props
    return found


def payload_declarations(source: str, defs: dict) -> list[str]:
    """Why each type ``source`` declares is a REST payload written by hand: not a known UI type,
    an alias of a generated type, or the properties of a generated record."""
    problems = []
    for name, props in declared_types(source).items():
        if re.search(rf"type\s+{name}\s*=\s*({'|'.join(defs)})(\[\])?\s*;", source):
            problems.append(f"{name}: an alias of a generated type (import the generated name)")
        if props is None:
            continue
        if name not in UI_TYPES:
            problems.append(f"{name}: not one of the UI's own types (tests/test_panel_types.py UI_TYPES)")
        for record, schema in defs.items():
            required = set(schema.get("required", ()))
            if schema.get("type") == "object" and len(required) >= 2 and required <= props:
                problems.append(f"{name}: re-declares the generated {record}")
    return problems


def test_no_typescript_file_declares_a_rest_payload_by_hand():
    defs = api_schema()["$defs"]
    sources = sorted(p for p in (LABEXT / "src").glob("*.ts*") if p.name != GENERATED.name)
    problems = [f"{p.name}: {problem}" for p in sources for problem in payload_declarations(p.read_text(), defs)]
    assert problems == []


def test_the_payload_check_finds_a_hand_written_payload():
    """The check is real: yesterday's hand-written kernel record, an alias and an object type."""
    defs = api_schema()["$defs"]
    kernel = """
export interface IGpuKernel {
  kernel_id: string;
  session_id: string | null;
  notebook: string | null;
  execution_state: string | null;
  idle_s: number | null;
  run_id: string | null;
  memory: number;
  gpus: number[];
  idle_warning: boolean;
}"""
    assert payload_declarations(kernel, defs) == [
        "IGpuKernel: not one of the UI's own types (tests/test_panel_types.py UI_TYPES)",
        "IGpuKernel: re-declares the generated GpuKernel",
    ]
    checkpoints = "export type ICheckpoints = {\n  run_id: string;\n  checkpoints: RunCheckpoint[];\n  rotated: 1;\n};"
    assert "ICheckpoints: re-declares the generated RunCheckpoints" in payload_declarations(checkpoints, defs)
    assert "IRun: an alias of a generated type (import the generated name)" in payload_declarations(
        "export type IRun = Run;", defs
    )
    lease_fields = "\n".join(f"  {field}: number;" for field in ("uuid", "index", "run_id", "since", "ended", "shared"))
    ui_named = f"interface IParent {{\n{lease_fields}\n}}"  # a UI type's name does not hide a payload
    assert payload_declarations(ui_named, defs) == ["IParent: re-declares the generated RunGpu"]
