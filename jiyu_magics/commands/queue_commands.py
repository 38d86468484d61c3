"""``jiyu queue``: the runs waiting for GPUs (or a CPU job slot), in the order they will start,
and ``--top ID`` to move one to the front."""

from __future__ import annotations

import argparse


def add_commands(commands) -> None:
    p = commands.add_parser(
        "queue",
        help="list queued runs in start order; --top ID moves one to the front",
        description="Runs wait queued until the GPUs they asked for (--gpus) are free: first "
        "by --priority, then in submission order. No daemon: each run's own "
        "supervisor starts it when the run store says it is its turn.",
    )
    p.add_argument("--top", metavar="ID", help="move this queued run (id or unique prefix) to the front")
    p.add_argument("--json", action="store_true", help="print the queue as JSON")
    p.set_defaults(handler=run_queue)


def run_queue(args: argparse.Namespace) -> int:
    from .. import jobs
    from ..views import queue_table as view
    from ..views.run_record import cli_record
    from . import CliError, print_json

    try:
        if args.top:
            run = jobs.move_to_top(args.top)
            print(f"Run {run.id} ({run.name}) is now first in the queue.")
            return 0
        queued = jobs.queued_runs()
    except jobs.JobError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json([cli_record(run) for run in queued])
    else:
        print(view.render_text(queued))
    return 0
