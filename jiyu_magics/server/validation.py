"""What a request may contain: JSON bodies, byte offsets and job submissions, checked once.

Each check raises ``RequestError`` with a message that names the field and what was expected,
so the panel can show it verbatim and a ``curl`` user knows what to fix.
"""

from __future__ import annotations

import json
import keyword
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .http_errors import RequestError
from .notebook_paths import resolve_notebook

MAX_NPROC = 1024
MAX_BODY_BYTES = 1024 * 1024
MAX_OFFSET = 2**63 - 1  # what a file offset can be
MAX_NAME = 200
MAX_PARAM_LINES = 1000
MAX_PARAM_BYTES = 64 * 1024  # one parameter's value as JSON (or one typed line): a model size, not a data set
MAX_LIST = 10_000  # runs one GET /jiyu/api/runs may ask for
SUBMIT_FIELDS = ("notebook", "nproc", "params", "param_lines", "name", "gpus", "priority", "share", "stall_timeout")
MAX_GPUS = 1024
MAX_PRIORITY = 10**6


@dataclass
class Submission:
    """A checked ``POST /jiyu/api/runs`` body, ready for ``jobs.submit``. Parameters come as
    values (``params``) or as the ``NAME = VALUE`` lines a person typed (``param_lines``, read
    by the jobs layer with the ``-p`` grammar when the run is submitted)."""

    notebook: Path
    nproc: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    param_lines: list[str] = field(default_factory=list)
    name: str | None = None
    gpus: int | None = None  # None: one per process where GPUs are visible
    priority: int = 0
    share: bool = False
    stall_timeout: float | None = None  # None: the rule (jiyu submit's --stall-timeout)


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


def submission(body: dict, root: str | Path) -> Submission:
    unknown = sorted(set(body) - set(SUBMIT_FIELDS))
    if unknown:
        raise RequestError(
            f"unknown field(s) {', '.join(map(repr, unknown))}; a submission takes {', '.join(SUBMIT_FIELDS)}"
        )
    if body.get("params") and body.get("param_lines"):
        raise RequestError("give 'params' (values) or 'param_lines' (NAME = VALUE text), not both")
    return Submission(
        notebook=resolve_notebook(root, body.get("notebook")),
        nproc=nproc(body.get("nproc", 1)),
        params=params(body.get("params")),
        param_lines=param_lines(body.get("param_lines")),
        name=run_name(body.get("name")),
        gpus=gpus(body.get("gpus")),
        priority=priority(body.get("priority", 0)),
        share=flag("share", body.get("share", False)),
        stall_timeout=stall_timeout(body.get("stall_timeout")),
    )


def gpus(value: Any) -> int | None:
    """GPUs to lease per node: absent or null for the default (one per process)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise RequestError(f"'gpus' must be an integer from 0 to {MAX_GPUS} (0 runs on the CPU), got {value!r}")
    return value


def stall_timeout(value: Any) -> float | None:
    """Seconds without a logged step before the job is flagged stalled (``--stall-timeout``):
    absent or null for the rule, 0 to turn it off."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise RequestError(
            f"'stall_timeout' must be a number of seconds >= 0 (0 turns stall detection off), got {repr(value)[:40]}"
        )
    return float(value)


def priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_PRIORITY:
        raise RequestError(f"'priority' must be an integer from -{MAX_PRIORITY} to {MAX_PRIORITY}, got {value!r}")
    return value


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RequestError(f"'{name}' must be true or false, got {value!r}")
    return value


def nproc(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NPROC:
        raise RequestError(f"'nproc' must be an integer from 1 to {MAX_NPROC} (processes per node), got {value!r}")
    return value


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


def run_name(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_NAME or not value.isprintable():
        raise RequestError(f"'name' must be printable text of at most {MAX_NAME} characters")
    return value.strip() or None
