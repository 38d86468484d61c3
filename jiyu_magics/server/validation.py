"""What a request may contain: JSON bodies, byte offsets, listing limits and a submission's
notebook and parameters, checked once.

Each check raises ``RequestError`` with a message that names the field and what was expected,
so the panel can show it verbatim and a ``curl`` user knows what to fix. A submission's options
(nproc, gpus, priority, name, ...) are the jobs layer's ``SubmitOptions``, checked there as for
``%submit`` and ``jiyu submit``; its failure is a 400 too (``jobs_bridge``).
"""

from __future__ import annotations

import json
import keyword
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .http_errors import RequestError
from .notebook_paths import resolve_notebook

MAX_BODY_BYTES = 1024 * 1024
MAX_OFFSET = 2**63 - 1  # what a file offset can be
MAX_PARAM_LINES = 1000
MAX_PARAM_BYTES = 64 * 1024  # one parameter's value as JSON (or one typed line): a model size, not a data set
MAX_LIST = 10_000  # runs one GET /jiyu/api/runs may ask for
# a submission's own fields: the notebook and its parameters (values or typed lines); its other
# fields are the options a request may set, by the names the jobs layer declares them with
# (``jobs.submit_options.request_fields``), passed in by the handler
SUBMISSION_FIELDS = ("notebook", "params", "param_lines")


@dataclass
class Submission:
    """A checked ``POST /jiyu/api/runs`` body: the notebook, its parameters as values
    (``params``) or as the ``NAME = VALUE`` lines a person typed (``param_lines``, read by the
    jobs layer with the ``-p`` grammar), and the rest of the body, the ``SubmitOptions`` fields
    the jobs layer checks."""

    notebook: Path
    params: dict[str, Any] = field(default_factory=dict)
    param_lines: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def json_object(body: bytes) -> dict:
    if len(body or b"") > MAX_BODY_BYTES:
        raise RequestError(f"the request body is larger than {MAX_BODY_BYTES // 1024} KiB")
    try:
        data = json.loads(body or b"null", parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as error:
        raise RequestError(f"the request body is not valid JSON ({error})") from None
    except RecursionError:
        raise RequestError("the request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    return data


def offset(text: str | None) -> int:
    """A byte offset from a query string: a non-negative integer, 0 when absent."""
    if text is None or text == "":
        return 0
    if not (text.isascii() and text.isdigit()):
        raise RequestError(f"'offset' must be a non-negative integer byte offset, got {text[:40]!r}")
    if len(text) > 19 or int(text) > MAX_OFFSET:
        raise RequestError(f"'offset' {text[:40]}{'…' if len(text) > 40 else ''} is past the end of any log")
    return int(text)


def list_limit(text: str | None) -> int | None:
    """``?limit=N`` of the runs list: 1 to ``MAX_LIST``; absent for the server's default."""
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or not 1 <= int(text) <= MAX_LIST:
        raise RequestError(f"'limit' must be a whole number from 1 to {MAX_LIST}, got {text[:40]!r}")
    return int(text)


def since(text: str | None) -> float | None:
    """``?since=T`` of the runs list: runs created at or after T, in unix seconds."""
    if text is None or text == "":
        return None
    try:
        value = float(text) if len(text) <= 32 else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RequestError(f"'since' must be a time in unix seconds (e.g. 1764547200), got {text[:40]!r}")
    return value


def submission(body: dict, root: str | Path, option_fields: Sequence[str]) -> Submission:
    """The body checked: no field but the submission's own and ``option_fields`` (the options'
    declared names), a notebook under ``root``, parameters as values or as lines; the options
    are taken by name, to be checked by the jobs layer."""
    fields = [*SUBMISSION_FIELDS, *option_fields]
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(f"unknown field(s) {', '.join(map(repr, unknown))}; a submission takes {', '.join(fields)}")
    if body.get("params") and body.get("param_lines"):
        raise RequestError("give 'params' (values) or 'param_lines' (NAME = VALUE text), not both")
    return Submission(
        notebook=resolve_notebook(root, body.get("notebook")),
        params=params(body.get("params")),
        param_lines=param_lines(body.get("param_lines")),
        options={name: body[name] for name in option_fields if name in body},
    )


def params(value: Any) -> dict[str, Any]:
    """Parameters injected after the notebook's ``parameters`` cell: Python identifiers mapped
    to JSON values."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError("'params' must be an object mapping parameter names to values")
    for name, item in value.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            raise RequestError(f"parameter name {name[:40]!r} is not a Python identifier")
        if len(json.dumps(item).encode()) > MAX_PARAM_BYTES:
            raise RequestError(
                f"parameter {name!r} is larger than {MAX_PARAM_BYTES // 1024} KiB as JSON; "
                "pass a path to the data instead"
            )
    return dict(value)


def param_lines(value: Any) -> list[str]:
    """The submit dialog's parameter text, one ``NAME = VALUE`` a line, as typed."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_PARAM_LINES or not all(isinstance(line, str) for line in value):
        raise RequestError(
            f"'param_lines' must be a list of at most {MAX_PARAM_LINES} strings, one 'NAME = VALUE' each"
        )
    for number, line in enumerate(value, 1):
        if len(line.encode("utf-8", "surrogatepass")) > MAX_PARAM_BYTES:
            raise RequestError(
                f"'param_lines' line {number} is larger than {MAX_PARAM_BYTES // 1024} KiB; "
                "pass a path to the data instead"
            )
    return value
