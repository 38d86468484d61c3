"""``jiyu store repair`` and ``jiyu doctor --store``: the run store checked and rebuilt."""

from __future__ import annotations

import argparse


def add_commands(commands) -> None:
    p = commands.add_parser(
        "store",
        help="the run store: `jiyu store repair` rebuilds it from the run folders",
        description="The SQLite run store under JIYU_HOME. A corrupt or deleted store is "
        "rebuilt from the run folders (each holds a copy of its row and its "
        "event log); a broken file is set aside, never deleted.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    repair = actions.add_parser("repair", help="set a broken store aside and rebuild the runs from their folders")
    repair.set_defaults(handler=run_repair)


def run_store_check(args: argparse.Namespace) -> int:
    from ..core.store.repair import check_store
    from . import print_json

    check = check_store()
    if getattr(args, "json", False):
        print_json(
            {"path": str(check.path), "healthy": check.healthy, "problems": check.problems, "notes": check.notes}
        )
    else:
        print(f"Run store {check.path}: {'ok' if check.healthy else 'PROBLEM'}")
        for line in check.problems:
            print(f"  problem: {line}")
        for line in check.notes:
            print(f"  {line}")
    return 0 if check.healthy else 1


def run_repair(args: argparse.Namespace) -> int:
    from ..core.store.repair import repair_store

    report = repair_store()
    if report.set_aside:
        print(f"Set the broken store aside as {report.set_aside}.")
    print(
        f"Rebuilt {report.path}: {report.restored} run(s) restored from their folders "
        f"({report.from_records} from their saved rows, the rest from their event logs)"
        + (f"; {report.kept} run(s) already in the store kept as they are." if report.kept else ".")
    )
    return 0
