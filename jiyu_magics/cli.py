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
    gpu_commands,
    job_commands,
    plot_commands,
    queue_commands,
    store_commands,
    track_commands,
    usage_commands,
    weights_commands,
)
from .core.store.database import StoreUnusable

# what a disk says when it cannot take a write (read-only, full, over quota, failing, not ours):
# one line with the reason, exit code 1, as for a store that cannot be used
DISK_ERRORS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EPERM})
COMMAND_MODULES = (
    gpu_commands,
    job_commands,
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
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except CliError as error:
        parser.exit(2, f"jiyu {args.command}: error: {error}\n")
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
