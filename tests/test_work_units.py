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


def test_the_machine_wide_groups_start_first_and_the_image_last():
    units = ["tests/test_a.py", work_units.IMAGE_MODULE, "unix-users", "tests/test_b.py", "slurm"]
    ordered = sorted(units, key=work_units.run_order)
    assert ordered == ["slurm", "unix-users", "tests/test_a.py", "tests/test_b.py", work_units.IMAGE_MODULE]


def test_two_workers_keep_a_module_and_a_machine_wide_group_each_on_one_worker(tmp_path):
    """Through xdist itself: its own grouping once split every module across the workers while
    the suite still passed (pytest 9.2), so what ran where is what is asserted."""
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
    modules = ["test_a", "test_b", "test_c", "test_slurm_runs", "test_ranks_slurm", "test_box_users", "test_box_hub"]
    for module in modules:
        (suite / f"{module}.py").write_text(probe)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--no-loadscope-reorder", "-p", "no:cacheprovider", "."],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {}
    for path in where.iterdir():
        ran.setdefault(work_units.work_unit(path.name.partition(".py")[0] + ".py"), set()).add(path.read_text())
    assert len(list(where.iterdir())) == 6 * len(modules)
    assert {unit: len(workers) for unit, workers in ran.items()} == {
        "test_a.py": 1,
        "test_b.py": 1,
        "test_c.py": 1,
        "slurm": 1,
        "unix-users": 1,
    }
    assert set().union(*ran.values()) == {"gw0", "gw1"}, "both workers had work"
