"""``jiyu plot``: a run's loss curve as a PNG, drawn on demand from its event log.

Training draws nothing; the notebook dashboard and text progress leave ``loss.png`` in the run
folder when they show a run's end. This draws it for any run, at any time (also mid-run, and
for ``fit`` called from a script with nobody watching).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_commands(commands) -> None:
    p = commands.add_parser(
        "plot",
        help="draw a run's loss curve as a PNG (default: the run's loss.png)",
        description="Draws the loss curve (raw, smoothed, validation) of the run's latest fit call from its event log.",
    )
    p.add_argument("id", help="run id or unique prefix")
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write the PNG (default: loss.png in the run's folder)",
    )
    p.add_argument(
        "--force", action="store_true", help="write through a symbolic link at FILE (to its target; refused otherwise)"
    )
    p.set_defaults(handler=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from ..core.events.log import read_events
    from ..core.runs.files import RunFiles
    from ..core.store.run_row import UnknownRun
    from ..core.store.run_store import RunStore
    from ..core.text import shown
    from ..core.user_files import NotARegularFile, write_regular_file
    from ..views.loss_plot import events_loss_png
    from . import CliError

    try:
        run = RunStore().resolve(args.id)
    except UnknownRun as error:
        raise CliError(str(error)) from None
    files = RunFiles.of(run.id)
    png = events_loss_png(read_events(files.events)[0])
    if png is None:
        raise CliError(f"run {run.id} ({run.name}) has logged no loss yet")
    try:
        path = files.write_loss_plot(png) if args.output is None else write_regular_file(args.output, png, args.force)
    except NotARegularFile as error:
        raise CliError(f"cannot write {shown(error)}") from None
    except OSError as error:
        raise CliError(f"cannot write {args.output or files.loss_plot}: {error.strerror or error}") from None
    print(path)
    return 0
