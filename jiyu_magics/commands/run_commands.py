"""``jiyu show`` (one run: what it was trained with, where it got to, its lineage and its
checkpoints) and ``jiyu compare`` (runs side by side, what differs first)."""

from __future__ import annotations

import argparse
import sys


def add_commands(commands) -> None:
    p = commands.add_parser(
        "show",
        help="one run: status, parameters, model, optimizer, metrics, lineage, checkpoints",
        description="What a run was trained with (the notebook's parameters, the model, the "
        "optimizer's hyperparameters, the data and fit options its last training call "
        "recorded), where it got to, the run it resumed from and those that resumed it, "
        "and the checkpoints that exist, each with the command that resumes from it.",
    )
    p.add_argument("id", help="run id or unique prefix")
    p.add_argument("--json", action="store_true", help="print the run record and its details as JSON")
    p.set_defaults(handler=run_show)

    p = commands.add_parser(
        "compare",
        help="runs side by side: the parameters and options that differ, then the metrics",
        description="One column per run: the parameters, model, optimizer, data and fit options "
        "that differ between the runs (marked *), their final and best metrics, and "
        "one line of what is the same in every run.",
    )
    p.add_argument("ids", nargs="+", metavar="ID", help="run ids or unique prefixes (two or more)")
    p.add_argument("--json", action="store_true", help="print one record per run as JSON")
    p.set_defaults(handler=run_compare)


def details(run_id: str):
    """The run and what ``jiyu show`` tells of it (``views.run_show.RunDetails``)."""
    from ..core.events.checkpoints import on_disk
    from ..core.events.fold import RunState
    from ..core.events.log import read_events
    from ..core.runs.files import RunFiles
    from ..core.store.run_row import UnknownRun
    from ..core.store.run_store import RunStore
    from ..jobs.run_control import with_leftovers
    from ..views.run_show import RunDetails
    from . import CliError

    store = RunStore()
    try:
        run = with_leftovers([store.resolve(run_id)], store.host)[0]
    except UnknownRun as error:
        raise CliError(str(error)) from None
    events = RunFiles.of(run.id).events
    state = RunState.of(read_events(events)[0])
    parent = None
    if state.parent_run:
        try:
            parent = store.get(state.parent_run)
        except UnknownRun:
            parent = None
    children = [r for r in store.list(limit=500) if r.summary is not None and r.summary.get("parent_run") == run.id]
    return RunDetails(run, state, on_disk(events), parent, children)


def run_show(args: argparse.Namespace) -> int:
    from ..views.run_record import cli_record
    from ..views.run_show import render_text
    from . import print_json

    d = details(args.id)
    if args.json:
        s = d.state
        tracked = {
            key: getattr(s, key)
            for key in ("model", "params", "optimizer", "optimizer_groups", "scheduler", "config", "options")
        }
        print_json(
            {
                **cli_record(d.run),
                **tracked,
                "parent_run": s.parent_run,
                "parent_step": s.parent_step,
                "children": [c.id for c in d.children],
                **d.checkpoints.to_json(),
            }
        )
    else:
        sys.stdout.write(render_text(d))
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from ..core.run_comparison import compare
    from ..core.store.run_row import UnknownRun
    from ..views.compare_view import compare_text
    from . import CliError, print_json

    if len(args.ids) < 2:
        raise CliError(f"compare takes two or more run ids, got one ({args.ids[0]}); jiyu show {args.ids[0]} shows one")
    try:
        records, _ = compare(args.ids)
    except UnknownRun as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json(records)
    else:
        print(compare_text(records))
    return 0
