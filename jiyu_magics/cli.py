"""The ``jiyu`` command line: the same functions as the magics, for a shell.

Subcommands register themselves from small modules (``commands/``) so each concern keeps its
own parser.
Bad input exits with code 2 and one line on stderr: argparse's exit code, without the usage
block it prints first (a wrong value in a long command line hid under it; ``--help`` has it).
"""

from __future__ import annotations

import argparse
import errno
import sys

from ._version import __version__
from .commands import (
    CliError,
    box_commands,
    gpu_commands,
    job_commands,
    plot_commands,
    queue_commands,
    run_commands,
    store_commands,
    track_commands,
    usage_commands,
    weights_commands,
)
from .core.box.client import BoxRefused
from .core.did_you_mean import with_suggestion
from .core.store import database
from .core.store.database import StoreBusy, StoreUnusable

# what a disk says when it cannot take a write (read-only, full, over quota, failing, not ours):
# one line with the reason, exit code 1, as for a store that cannot be used
DISK_ERRORS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EPERM})
BUSY_EXIT = 75  # EX_TEMPFAIL (sysexits.h): the store is busy, the same command may succeed later
COMMAND_MODULES = (
    box_commands,
    gpu_commands,
    job_commands,
    run_commands,
    plot_commands,
    queue_commands,
    store_commands,
    track_commands,
    usage_commands,
    weights_commands,
)


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line that says where the usage is; subcommands' parsers are of
    this class too (``add_subparsers`` makes them the parent's class)."""

    def error(self, message: str):
        message = with_suggestion(message, _flags(self), _commands(self))
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices
    ]


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """argparse's parse, with an unknown option reported by the sub-command it was given to:
    ``jiyu logs --tial 3`` says ``jiyu logs: error: unrecognized arguments: --tial 3 (did you
    mean --tail?)``."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="jiyu", description="GPUs, training runs and background torchrun jobs of JiyuTrainer.")
    parser.add_argument("--version", action="version", version=f"jiyu {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # `jiyu` alone: what it can do, not an error line
        parser.print_help(sys.stderr)
        return 2
    args = parse(parser, argv)
    database.busy_notice = lambda line: print(f"jiyu {args.command}: {line}", file=sys.stderr, flush=True)
    try:
        return int(args.handler(args) or 0)
    except (CliError, BoxRefused) as error:  # a box's rule refused it: the same one line, exit 2
        parser.exit(2, f"jiyu {args.command}: error: {error}\n")
    except StoreBusy as error:  # a healthy store another process holds: "try again", not "repair"
        parser.exit(BUSY_EXIT, f"jiyu {args.command}: error: {error}\n")
    except StoreUnusable as error:
        parser.exit(1, f"jiyu {args.command}: error: {error}\n")
    except OSError as error:
        if error.errno not in DISK_ERRORS:
            raise
        where = f": {error.filename}" if error.filename else ""
        parser.exit(1, f"jiyu {args.command}: error: {error.strerror or error}{where}\n")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
