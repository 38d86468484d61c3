"""``jiyu usage``: GPU-hours and idle GPU-hours per run, notebook or day."""

from __future__ import annotations

import argparse


def add_commands(commands) -> None:
    p = commands.add_parser(
        "usage",
        help="GPU-hours and idle GPU-hours per run, notebook, day or user",
        description="GPU time is each run's lease time x its GPUs; idle GPU time is time "
        "a leased GPU (or one a kernel holds memory on) ran under 5% utilisation, "
        "as sampled by the Jupyter server and the job supervisors.",
    )
    p.add_argument(
        "--since",
        type=since_time,
        default="7d",
        metavar="WHEN",
        help="how far back: 30m, 12h, 7d, 2w, or a date (2026-11-01); default 7d",
    )
    p.add_argument(
        "--by",
        choices=("run", "notebook", "day", "user"),
        default="run",
        help="how to group (default run); user: every user of a shared box (jiyu box), GPU time only",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(handler=run_usage)


def since_time(text: str) -> float:
    """A unix time from ``7d``-style spans or a date (``core.time_spans``, as ``jiyu jobs --since``)."""
    from ..core import time_spans

    try:
        return time_spans.since_time(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def run_usage(args: argparse.Namespace) -> int:
    from ..core.gpu.usage import report
    from ..core.store.run_store import RunStore
    from ..views import usage_table as view
    from . import print_json

    rows = report(RunStore().db, args.since, args.by)
    if args.json:
        print_json([row.to_dict() for row in rows])
    else:
        print(view.render_text(rows, args.by, args.since))
    return 0
