"""Runs for the server tests: real store rows, real event logs and stdout logs on disk."""

from __future__ import annotations

import functools
import json
import os
import re

import jsonschema
from tornado.httpclient import HTTPResponse
from traitlets.config import Config

from jiyu_magics.core.events.log import EventLog
from jiyu_magics.core.processes.info import process_start_time
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_row import Run
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.server.rest_schema import api_schema


def server_config(**jiyu) -> Config:
    """The extension enabled and every route closed to anonymous requests, as in production."""
    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"jiyu_magics": True, "jupyter_server_terminals": False},
                "allow_unauthenticated_access": False,
            },
            "JiyuApp": {"refresh_interval": 0.01, **jiyu},
        }
    )


def live_run(name: str = "digits", kind: str = "job", **fields) -> Run:
    """A ``running`` run owned by this test process (so reconcile keeps it running)."""
    pid = os.getpid()
    return RunStore().create(
        kind, name, status="running", pid=pid, pid_started=process_start_time(pid), nproc=2, **fields
    )


def ended_run(kind: str = "job", name: str = "ended", status: str = "succeeded", **fields) -> Run:
    """A run that has ended (born running, then its owner recorded the end, as the state
    machine has it)."""
    store = RunStore()
    run = store.create(kind, name, status="running", **fields)
    return store.finish(run.id, status, exit_code=0 if status == "succeeded" else 1)


def training_events(run: Run, steps: int = 5, total: int = 20) -> RunFiles:
    files = RunFiles.of(run.id).create()
    with EventLog(files.events) as log:
        log.append("start", total_steps=total, epochs=2, nproc=run.nproc)
        for step in range(1, steps + 1):
            log.append("step", step=step, epoch=0, loss=2.0 / step, lr=1e-3, samples_per_s=500.0 + step)
        log.append("val", step=steps, loss=0.9, accuracy=0.71)
    return files


def coloured_traceback(message: str = "boom on rank 1") -> str:
    """A traceback as a rank's IPython shell prints it into its pool's log: in colour, with
    the terminal codes IPython's own formatter writes."""
    import sys

    from IPython.core.ultratb import FormattedTB

    try:
        raise ValueError(message)
    except ValueError:
        kind, value, tb = sys.exc_info()
    text = FormattedTB(mode="Context", theme_name="linux").text(kind, value, tb)
    assert "\x1b[" in text, "IPython's formatter wrote no colour: the tests using this would prove nothing"
    return text


def body(response: HTTPResponse) -> dict:
    return json.loads(response.body)


@functools.cache
def _schema_defs() -> dict:
    return api_schema()["$defs"]


def follows_schema(name: str, data) -> None:
    """Raises ``jsonschema.ValidationError`` unless ``data`` is what the REST schema's ``$defs``
    entry ``name`` declares (the type the panel's TypeScript is generated from)."""
    jsonschema.validate(data, {"$ref": f"#/$defs/{name}", "$defs": _schema_defs()})


def run_routes(web_app, package: str = "jiyu_magics.server") -> list[tuple[str, type]]:
    """Every (url regex, handler) the running server routes to a class of ``package``,
    found by walking tornado's routers: what is really served, not what we meant to add."""
    found: list[tuple[str, type]] = []

    def walk(router) -> None:
        for rule in getattr(router, "rules", []):
            target = rule.target
            if isinstance(target, type) and target.__module__.startswith(package):
                found.append((rule.matcher.regex.pattern, target))
            else:
                walk(target)

    walk(web_app.default_router)
    walk(web_app.wildcard_router)
    return sorted(set(found), key=lambda r: r[0])


def concrete(pattern: str, run_id: str) -> str:
    """A request path matching a route regex, with ``run_id`` for each named group."""
    return re.sub(r"\(\?P<\w+>[^)]*\)", run_id, pattern).rstrip("$")
