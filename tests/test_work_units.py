"""How `make test` shares the suite between its pytest-xdist workers (tests/work_units.py)."""

from __future__ import annotations

import subprocess
import sys

from . import work_units
from .conftest import ROOT


def test_a_unit_is_a_module_or_a_machine_wide_group():
    assert work_units.work_unit("tests/test_ranks.py::test_x[a::b]") == "tests/test_ranks.py"
    assert work_units.work_unit("tests/test_slurm_nodes.py::test_y") == "slurm"
    assert work_units.work_unit("tests/test_lab_slurm.py::test_z") == "slurm"
    assert work_units.work_unit("tests/test_box_hub.py::test_w") == "unix-users"
    named = work_units.WAITING_UNITS | set(work_units.FIRST) | {work_units.IMAGE_MODULE}
    assert all(unit in work_units.MACHINE_WIDE_GROUPS or (ROOT / unit).is_file() for unit in named), named


def test_the_machine_wide_groups_and_the_longest_module_start_first_and_the_image_last():
    units = ["tests/test_a.py", work_units.IMAGE_MODULE, "tests/test_train_nproc.py", "unix-users", "slurm"]
    ordered = sorted(units, key=work_units.run_order)
    assert ordered == ["slurm", "unix-users", "tests/test_train_nproc.py", "tests/test_a.py", work_units.IMAGE_MODULE]


def _where_tests_ran(tmp_path, modules: list[str], workers: int) -> dict[str, set[str]]:
    """Runs six probe tests in each module under ``workers`` xdist workers with our scheduler;
    returns each unit's set of workers. Through xdist itself: its own grouping once split every
    module across the workers while the suite still passed (pytest 9.2), so what ran where is
    what is asserted."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tests import work_units\n\n"
        "def pytest_xdist_make_scheduler(config, log):\n    return work_units.make_scheduler(config, log)\n"
    )
    where = tmp_path / "where"
    where.mkdir()
    probe = (
        "import os, pytest\n\n@pytest.mark.parametrize('n', range(6))\ndef test_probe(n, request):\n"
        f"    path = os.path.join({str(where)!r}, request.node.nodeid.replace('/', '_'))\n"
        "    open(path, 'w').write(os.environ['PYTEST_XDIST_WORKER'])\n"
    )
    (suite / "tests").mkdir()  # nodeids as the suite's own: tests/test_x.py::...
    for module in modules:
        (suite / "tests" / f"{module}.py").write_text(probe)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--no-loadscope-reorder", "-p", "no:cacheprovider"],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list(where.iterdir())) == 6 * len(modules)
    ran: dict[str, set[str]] = {}
    for path in where.iterdir():
        module = path.name.partition(".py")[0].removeprefix("tests_")
        ran.setdefault(work_units.work_unit(f"tests/{module}.py"), set()).add(path.read_text())
    return ran


def test_two_workers_keep_a_module_and_a_machine_wide_group_each_on_one_worker(tmp_path):
    modules = ["test_a", "test_b", "test_c", "test_slurm_runs", "test_ranks_slurm", "test_box_users", "test_box_hub"]
    ran = _where_tests_ran(tmp_path, modules, workers=2)
    assert {unit: len(workers) for unit, workers in ran.items()} == {
        "tests/test_a.py": 1,
        "tests/test_b.py": 1,
        "tests/test_c.py": 1,
        "slurm": 1,
        "unix-users": 1,
    }
    assert set().union(*ran.values()) == {"gw0", "gw1"}, "both workers had work"


def test_a_third_worker_runs_only_the_waiting_units(tmp_path):
    """One worker, the lane, runs waiting units and nothing else; a module that needs the CPU
    never runs there. (The other two may take waiting units too once their own are done.)"""
    modules = ["test_a", "test_b", "test_c", "test_train_nproc", "test_slurm_runs", "test_lab_slurm"]
    modules += ["test_lab_panel", "test_lab_pages", "test_box_users"]
    ran = _where_tests_ran(tmp_path, modules, workers=3)
    assert all(len(workers) == 1 for workers in ran.values()), ran
    units_of: dict[str, set[str]] = {}
    for unit, (worker,) in ran.items():
        units_of.setdefault(worker, set()).add(unit)
    assert set(units_of) == {"gw0", "gw1", "gw2"}, "every worker had work"
    lanes = [worker for worker, units in units_of.items() if units <= work_units.WAITING_UNITS]
    assert len(lanes) == 1, units_of
    (lane,) = lanes
    heavy = {"tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_train_nproc.py", "unix-users"}
    assert not heavy & units_of[lane], units_of
