"""The ``jiyu`` command line: the same functions as the magics, for a shell.

Subcommands register themselves from small modules so each concern keeps its own parser.
Bad input exits with code 2 and one line on stderr (argparse's convention).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from . import __version__

COMMAND_MODULES = ("gpu", "jobs")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jiyu", description="GPUs, training runs and background torchrun jobs of JiyuTrainer.")
    parser.add_argument("--version", action="version", version=f"jiyu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f".commands.{name}", __package__).add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except CliError as error:
        parser.exit(2, f"jiyu {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
