"""``jiyu track``: finished runs into TensorBoard or MLflow (``jiyu_magics.trackers.export``).

Idempotent: each tracker keeps how far it holds each run's event log, so a second export of
the same run, or of a run followed live (``--track``), adds nothing.
"""

from __future__ import annotations

import argparse
import sys


def add_commands(commands) -> None:
    p = commands.add_parser(
        "track",
        help="export finished runs to TensorBoard or MLflow (again: adds nothing)",
        description="Writes a finished run's scalars, parameters, tags and status into a tracker, "
        "as --track does live. A run already there is not written twice.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("id", nargs="?", help="run id or unique prefix")
    which.add_argument("--all", action="store_true", help="every finished run in the store")
    p.add_argument(
        "--to",
        required=True,
        action="append",
        metavar="TRACKER[:WHERE]",
        help="tensorboard[:DIR] (default DIR: $JIYU_HOME/tensorboard) or mlflow[:URI] (default: "
        "$MLFLOW_TRACKING_URI, else sqlite:///$JIYU_HOME/mlflow.db); a comma list or repeated for both",
    )
    p.set_defaults(handler=run_track)


def run_track(args: argparse.Namespace) -> int:
    from ..core.store.run_store import RunStore, UnknownRun
    from ..trackers.destinations import TrackSpecError, parse_track
    from ..trackers.export import ExportRefused, export_run
    from ..trackers.extras import check_installed
    from . import CliError

    try:
        destinations = parse_track(args.to)
        check_installed(destinations)
    except TrackSpecError as error:
        raise CliError(str(error)) from None
    if not destinations:
        raise CliError("--to none: name a tracker (tensorboard[:DIR] or mlflow[:URI])")
    store = RunStore()
    if args.all:
        runs = [run for run in reversed(store.list()) if not run.active]
    else:
        try:
            runs = [store.resolve(args.id)]
        except UnknownRun as error:
            raise CliError(str(error)) from None
    failed = 0
    for run in runs:
        for destination in destinations:
            try:
                exported = export_run(run, destination)
            except ExportRefused as error:
                if not args.all:
                    raise CliError(str(error)) from None
                continue  # --all: runs without an event log (never started) are not runs to track
            print(exported.line(), file=sys.stderr if exported.error else sys.stdout, flush=True)
            failed += exported.error is not None
    return 1 if failed else 0
