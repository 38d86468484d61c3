"""How `make test` shares the suite between its pytest-xdist workers, and in what order.

A unit of work is a test module, so that its module-scoped servers (JupyterLab, Chromium, the
trackers) start once. What exists once per machine is one unit whatever its module: the Slurm
clusters (session fixtures on fixed daemons) and the modules that make sets of real Unix users.

Those two long groups start first, the other modules in collection order, the image's module
last: its build runs beside the rest from the start. Longest-first for every unit (by the
seconds of a full run) was measured and dropped: it started the heaviest modules side by side,
kept the two cores 85-90 % busy where this order leaves them about 70 %, and the suite took
longer (the tests wait less on each other than on the CPU).

xdist's own ``--dist loadgroup`` renames nodeids, which pytest 9.2 no longer lets a plugin do (it
silently split every module across the workers): the units are made by a scheduler instead.
"""

from __future__ import annotations

from pathlib import Path

MACHINE_WIDE_GROUPS = {
    "slurm": ("test_slurm_runs", "test_slurm_nodes", "test_ranks_slurm", "test_lab_slurm"),
    "unix-users": ("test_box_hub", "test_box_users", "test_image_lab"),
}
IMAGE_MODULE = "tests/test_image_build.py"


def work_unit(nodeid: str) -> str:
    path = nodeid.partition("::")[0]
    module = Path(path).stem
    return next((group for group, modules in MACHINE_WIDE_GROUPS.items() if module in modules), path)


FIRST = ("slurm", "unix-users")


def run_order(unit: str) -> int:
    """The sort key of a unit's tests: the machine-wide groups, the modules, the image."""
    return FIRST.index(unit) if unit in FIRST else len(FIRST) + (unit == IMAGE_MODULE)


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        """One unit per ``work_unit``, handed out in the order the items were sorted."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)
