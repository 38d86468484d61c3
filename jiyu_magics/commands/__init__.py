"""Subcommands of the ``jiyu`` CLI, one module per concern, each with ``add_commands``, and
what they share: the user-error type (exit code 2) and the JSON printer."""

from __future__ import annotations

import argparse
import json
import sys


class CliError(Exception):
    """A user error found after parsing (unknown run id, missing notebook): exit code 2."""


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def print_json(data) -> None:
    """JSON text in one write (``json.dump`` to a stream writes each token on its own). A list
    is written one item a line: readable, greppable, and encoded by json's C encoder, which
    ``indent`` turns off (``jiyu jobs --all --json`` over 5000 runs: 2 s with ``indent``)."""
    if isinstance(data, list):
        items = ",\n  ".join(json.dumps(item, default=str) for item in data)
        sys.stdout.write(f"[\n  {items}\n]\n" if data else "[]\n")
    else:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
