"""``-p NAME VALUE`` parameters, papermill's convention: values are Python literals, and text
that is not a literal stays a string (``-p arch resnet`` gives ``"resnet"``).

One grammar for every entry point: ``%submit`` and ``jiyu submit|export`` parse ``-p`` pairs,
the server parses the lab panel's ``NAME = VALUE`` lines, both with :func:`literal_or_text`.
"""

from __future__ import annotations

import ast
import keyword
from typing import Any, Iterable, Mapping

from ..job_error import JobError

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
