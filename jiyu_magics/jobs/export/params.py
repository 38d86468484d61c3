"""Parameters for a notebook's ``parameters`` cell: ``-p NAME VALUE``, ``-y YAML`` and ``-f FILE``.

``-p`` values are Python literals, and text that is not a literal stays a string (``-p arch
resnet`` gives ``"resnet"``, ``-p sizes [64, 128]`` a list). That is more than papermill's ``-p``,
which turns only numbers and True/False/None into values and keeps all other text as it is
(``-p msg '"Hello"'`` stays ``"Hello"`` with its quotes there, ``Hello`` here; ``[1, 2]`` stays
text there): the values land in Python code, and lists and tuples are what people pass. The
jobs guide (docs/guide/jobs.md), ``--help`` and ``%submit?`` say so. ``-y``/``-f`` are papermill's: a YAML mapping, as
text or in a file (dates stay text, as papermill reads them), applied before ``-p``.

One grammar for every entry point: ``%submit`` and ``jiyu submit|export`` parse ``-p`` pairs,
the server parses the lab panel's ``NAME = VALUE`` lines, both with :func:`literal_or_text`.
"""

from __future__ import annotations

import ast
import functools
import keyword
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..job_error import JobError

QUOTES = ("'", '"')
MAX_PARAMS_FILE_BYTES = 1024 * 1024  # parameters, not data: a model's sizes and rates
EXPONENT_NUMBER = re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")

# Text that starts like a container or a quoted string was meant as a literal: a typo in it
# is an error, not a string the job would silently receive.
LITERAL_STARTS = tuple("[({'\"")


def parse_value(name: str, text: str) -> Any:
    try:
        return literal_or_text(text)
    except ValueError as error:
        raise JobError(f"-p {name}: {error}") from None


def literal_or_text(text: str) -> Any:
    """The value of ``text``; raises ``ValueError`` (the reason) for a broken literal."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if text.strip().startswith(LITERAL_STARTS):
            raise ValueError(f"{text!r} is not a valid Python literal") from None
        return text


def check_name(name: str) -> str:
    if not is_identifier(name):
        raise JobError(f"-p {name!r}: a parameter name must be a Python identifier")
    return name


def is_identifier(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def parse_pairs(pairs: Iterable[Iterable[str]] | None) -> dict[str, Any]:
    """``[("lr", "3e-4"), ("arch", "resnet")]`` as argparse gives them → ``{"lr": 0.0003, ...}``."""
    params: dict[str, Any] = {}
    for pair in pairs or ():
        pair = list(pair)
        if len(pair) != 2:
            raise JobError(f"-p takes a NAME and a VALUE, got {' '.join(map(str, pair)) or 'nothing'}")
        name, text = pair
        params[check_name(name)] = parse_value(name, text)
    return params


def parse_lines(lines: Iterable[str]) -> dict[str, Any]:
    """``NAME = VALUE`` lines as typed in the lab panel's submit dialog (blank lines and ``#``
    comments skipped): each VALUE read as ``-p NAME VALUE`` reads it. An error names the line."""
    params: dict[str, Any] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.strip().startswith("#"):
            continue
        name, equals, text = (part.strip() for part in line.partition("="))
        try:
            if not equals:
                raise ValueError("expected NAME = VALUE")
            if not is_identifier(name):
                raise ValueError(f"{name!r} is not a Python identifier")
            params[name] = literal_or_text(text)
        except ValueError as error:
            raise JobError(f"parameter line {number} ({line.strip()!r}): {error}") from None
    return params


def check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Parameters given as Python values (the API, the server): each must survive ``repr`` →
    ``literal_eval``, since that is how it reaches the job script."""
    checked = {}
    for name, value in (params or {}).items():
        check_name(name)
        try:
            same = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            same = False
        if not same:
            raise JobError(f"parameter {name}: {type(value).__name__} values cannot be written as a Python literal")
        checked[name] = value
    return checked


def assignment_lines(params: Mapping[str, Any]) -> list[str]:
    return [f"{name} = {value!r}" for name, value in params.items()]


def parse_yaml(text: str, origin: str = "-y") -> dict[str, Any]:
    """A YAML mapping of parameter names to values (papermill's ``-y``/``-f``). Text quoted as
    a whole (as IPython's own ``parse_argstring`` would hand it over) is read without them."""
    import yaml

    if len(text) > 1 and text[0] == text[-1] and text[0] in QUOTES:
        text = text[1:-1]
    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise JobError(f"{origin}: cannot read it as YAML{where}: {getattr(error, 'problem', None) or error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise JobError(
            f"{origin}: expected a mapping of parameter names to values (lr: 0.1), "
            f"got {'an' if type(data).__name__[0] in 'aeiou' else 'a'} {type(data).__name__}"
        )
    return _checked_mapping(data, origin)


def read_params_file(path: str) -> dict[str, Any]:
    """``-f params.yaml``: a file or a pipe (``-f <(make-params)``), at most
    ``MAX_PARAMS_FILE_BYTES``; a device (``/dev/zero`` would be read forever) or a folder is
    refused in one line."""
    file = Path(path).expanduser()
    if not file.is_file() and len(path) > 1 and path[0] == path[-1] and path[0] in QUOTES:
        file = Path(path[1:-1]).expanduser()
    try:
        with open(file, "rb") as stream:
            kind = os.fstat(stream.fileno()).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):
                raise JobError(f"-f {path}: not a parameters file (a device or a folder); give a YAML file")
            data = stream.read(MAX_PARAMS_FILE_BYTES + 1)
        if len(data) > MAX_PARAMS_FILE_BYTES:
            raise JobError(f"-f {path}: larger than {MAX_PARAMS_FILE_BYTES // 1024} KiB; pass paths to data instead")
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise JobError(f"-f {path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    return parse_yaml(text, f"-f {path}")


def _checked_mapping(data: dict, origin: str) -> dict[str, Any]:
    for name in data:
        if not is_identifier(name):
            raise JobError(f"{origin}: {name!r} is not a parameter name (a Python identifier)")
    try:
        return check_params(data)
    except JobError as error:
        raise JobError(f"{origin}: {error}") from None


@functools.cache
def _loader():
    """PyYAML's safe loader, less its timestamp rule (``date: 2024-01-01`` stays text, as
    papermill reads it; a ``datetime.date`` could not be written into the script anyway), plus
    YAML 1.2's exponent numbers: PyYAML (YAML 1.1) reads ``lr: 3e-4`` as the text "3e-4"."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_NUMBER, list("-+0123456789."))
    return Loader
