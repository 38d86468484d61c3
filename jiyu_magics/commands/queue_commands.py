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
        "supervisor starts it when the run store says it is its turn. On a shared box "
        "(jiyu box) the queue is every user's: users take turns by fair share (fewer recent "
        "GPU-hours first), other users' runs are listed with their user and kind only, and "
        "--top moves a run ahead of other users' only for those the box's policy lets jump.",
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
            moved = jobs.move_to_top(args.top)
            run = moved.run
            place = "first" if run.queue_position in (1, None) else f"at position {run.queue_position}"
            print(
                f"Run {run.id} ({run.name}) is now {place} in the queue." + (f" ({moved.note})" if moved.note else "")
            )
            return 0
        queued = jobs.queued_runs()
        others = jobs.others_waiting()
    except jobs.JobError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json([cli_record(run) for run in queued] + others)
    else:
        print(view.render_text(queued, others))
    return 0
