"""How `make test` shares the suite between its pytest-xdist workers, and in what order.

A unit of work is a test module, so that its module-scoped servers (JupyterLab, Chromium, the
trackers) start once. What exists once per machine is one unit whatever its module: the Slurm
clusters (session fixtures on fixed daemons) and the modules that make sets of real Unix users.

Units start longest first, by the seconds each took in the last full run (``work_units.json``
beside this file; a unit not listed counts as the median): a worker that runs out of work then
waits only for a short unit of the other's, not for a long one that happened to come late. The
image's module goes last, whatever it took: its build runs beside the rest from the start.

xdist's own ``--dist loadgroup`` renames nodeids, which pytest 9.2 no longer lets a plugin do (it
silently split every module across the workers): the units are made by a scheduler instead.
``python -m tests.work_units`` merges the seconds the last run measured
(test-artifacts/work_units.json) into the table.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
TABLE = TESTS / "work_units.json"
MEASURED = TESTS.parent / "test-artifacts" / "work_units.json"

MACHINE_WIDE_GROUPS = {
    "slurm": ("test_slurm_runs", "test_slurm_nodes", "test_ranks_slurm", "test_lab_slurm"),
    "unix-users": ("test_box_hub", "test_box_users", "test_image_lab"),
}
IMAGE_MODULE = "tests/test_image_build.py"


def work_unit(nodeid: str) -> str:
    path = nodeid.partition("::")[0]
    module = Path(path).stem
    return next((group for group, modules in MACHINE_WIDE_GROUPS.items() if module in modules), path)


def expected_seconds(table: dict[str, float]):
    """The sort key of a unit: longest first, the image's module last."""
    median = statistics.median(table.values()) if table else 0.0

    def key(unit: str) -> tuple[bool, float]:
        return unit == IMAGE_MODULE, -table.get(unit, median)

    return key


def read_table(path: Path = TABLE) -> dict[str, float]:
    try:
        return {str(unit): float(seconds) for unit, seconds in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        """One unit per ``work_unit``, handed out in the order the items were sorted."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


class Recorder:
    """The seconds each unit took in this run (setup, call and teardown of its tests), as the
    process that sees every report (xdist's controller, or a serial run) adds them up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[work_unit(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        if self.seconds and not session.config.option.collectonly:
            MEASURED.parent.mkdir(exist_ok=True)
            MEASURED.write_text(json.dumps(_rounded(self.seconds), indent=1, sort_keys=True) + "\n")


def _rounded(seconds: dict[str, float]) -> dict[str, float]:
    return {unit: round(value, 1) for unit, value in seconds.items()}


def merge(measured: Path = MEASURED, table: Path = TABLE) -> dict[str, float]:
    """The table with this run's units replaced by what they took now; units of modules that
    no longer exist are dropped."""
    merged = {**read_table(table), **read_table(measured)}
    modules = {f"tests/{path.name}" for path in TESTS.glob("test_*.py")}
    kept = _rounded({unit: s for unit, s in merged.items() if unit in modules or unit in MACHINE_WIDE_GROUPS})
    table.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return kept


if __name__ == "__main__":
    units = merge()
    print(f"{TABLE.relative_to(TESTS.parent)}: {len(units)} units, {sum(units.values()) / 60:.1f} min in all")
    sys.exit(0)
