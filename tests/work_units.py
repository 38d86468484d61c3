"""How `make test` shares the suite between its pytest-xdist workers, and in what order.

A unit of work is a test module, so that its module-scoped servers (JupyterLab, Chromium, the
trackers) start once. What exists once per machine is one unit whatever its module: the Slurm
clusters (session fixtures on fixed daemons) and the modules that make sets of real Unix users.

The waiting lane: with three workers or more, the last one runs only the units that spend most of
their time waiting (Slurm's 30 s checks of its limits, JupyterLab in Chromium), and ends when
none is left. Under two workers those units took a core's worth of a worker for about 15 minutes
while using about a third of it; the others are CPU-bound (torch's imports in every rank and
torchrun), so a third worker for all of them only crowded the two cores (1,710 s against 1,587 s).
The other workers take the waiting units too once they have nothing else. pytest took 1,576 s
with the lane, against 1,822 s under two workers (a fresh clone's `.ci/run`, 2 cores).

The order: the unix-users group first, then the longest module (last in collection order, it ran
alone for its last minute), the other modules in collection order, the image's module last: its
build runs beside the rest from the start. Longest-first for every unit (by the seconds of a full
run) was measured and dropped: it started the heaviest modules side by side and the suite took
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
WAITING_UNITS = frozenset(
    {
        "slurm",
        "tests/test_lab_panel.py",
        "tests/test_lab_pages.py",
        "tests/test_lab_notebook7.py",
        "tests/test_lab_gpu_owners.py",
        "tests/test_lab_stall.py",
    }
)
FIRST = ("slurm", "unix-users", "tests/test_train_nproc.py")
MIN_WORKERS_FOR_LANE = 3


def work_unit(nodeid: str) -> str:
    path = nodeid.partition("::")[0]
    module = Path(path).stem
    return next((group for group, modules in MACHINE_WIDE_GROUPS.items() if module in modules), path)


def run_order(unit: str) -> int:
    """The sort key of a unit's tests: the groups and modules of FIRST, the modules, the image."""
    return FIRST.index(unit) if unit in FIRST else len(FIRST) + (unit == IMAGE_MODULE)


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        """One unit per ``work_unit``, handed out in the order the items were sorted; the last
        of three or more workers is the waiting lane."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        lane = None  # named once, when the work is first handed out: not by position later

        def schedule(self) -> None:
            if self.collection is None and len(self.nodes) >= MIN_WORKERS_FOR_LANE:
                self.lane = self.nodes[-1]
            super().schedule()

        def _next_unit(self, node) -> str | None:
            if node is self.lane:
                return next((unit for unit in self.workqueue if unit in WAITING_UNITS), None)
            own = next((unit for unit in self.workqueue if unit not in WAITING_UNITS), None)
            return own if own is not None else next(iter(self.workqueue), None)

        def _assign_work_unit(self, node, unit: str | None = None) -> None:
            unit = unit or self._next_unit(node)
            if unit is None:
                return
            work = self.workqueue.pop(unit)
            self.assigned_work.setdefault(node, {})[unit] = work
            collection = self.registered_collections[node]
            node.send_runtest_some([collection.index(nodeid) for nodeid, done in work.items() if not done])

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            unit = self._next_unit(node)
            if unit is None:  # it runs what it holds, then ends: a worker
                node.shutdown()  # holds its last test until it is told there is no more
                return
            if self._pending_of(self.assigned_work[node]) <= 2:
                self._assign_work_unit(node, unit)

    return WorkUnits(config, log)
