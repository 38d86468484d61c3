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
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
