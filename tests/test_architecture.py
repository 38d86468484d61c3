"""The layers of ARCHITECTURE.md, as import-linter contracts in pyproject.toml: the package keeps
them, and each contract really breaks when a module imports across it (a contract that matches
nothing would pass forever). Each breaking import goes into a new module of a copy of the package,
so the cases do not depend on today's module names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (contract id, {new module: its source}, a line the broken contract must report)
BREAKING_IMPORTS = [
    ("layers", {"jobs/_probe.py": "import jiyu_magics.train\n"},
     "jiyu_magics.jobs is not allowed to import jiyu_magics.train"),
    ("layers", {"core/_probe.py": "from jiyu_magics import views\n"},
     "jiyu_magics.core is not allowed to import jiyu_magics.views"),
    ("acyclic", {"core/_probe_a.py": "from . import _probe_b\n", "core/_probe_b.py": "from . import _probe_a\n"},
     "No cycles are allowed in jiyu_magics.core."),
    ("core-pure", {"core/_probe.py": "import IPython\n"}, "jiyu_magics.core is not allowed to import IPython"),
    ("torch-in-train", {"core/_probe.py": "import torch\n"}, "jiyu_magics.core._probe -> torch"),
    ("ipython-in-notebook-adapters", {"views/_probe.py": "import IPython\n"}, "jiyu_magics.views._probe -> IPython"),
    ("ipywidgets-in-widgets", {"magics/_probe.py": "import ipywidgets\n"}, "jiyu_magics.magics._probe -> ipywidgets"),
    ("web-server-in-server", {"jobs/_probe.py": "from tornado import web\n"}, "jiyu_magics.jobs._probe -> tornado"),
    ("matplotlib-in-views", {"train/_probe.py": "import matplotlib\n"}, "jiyu_magics.train._probe -> matplotlib"),
]


def lint_imports(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package found in ``tree`` (its pyproject.toml and jiyu_magics/)."""
    assert LINT_IMPORTS.exists(), f"import-linter is not installed next to {sys.executable} (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)


def contract_ids() -> set[str]:
    return set(re.findall(r'^id = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE))


def test_the_package_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contract_ids())} kept, 0 broken." in result.stdout


def test_every_contract_has_an_import_that_breaks_it():
    assert contract_ids() == {case[0] for case in BREAKING_IMPORTS}


@pytest.mark.parametrize("contract, modules, reported", BREAKING_IMPORTS,
                         ids=[f"{c[0]}:{next(iter(c[1]))}" for c in BREAKING_IMPORTS])
def test_a_forbidden_import_breaks_its_contract(contract, modules, reported, tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "jiyu_magics", tmp_path / "jiyu_magics", ignore=shutil.ignore_patterns("__pycache__", "labextension"))
    for module, source in modules.items():
        (tmp_path / "jiyu_magics" / module).write_text(source)
    result = lint_imports(tmp_path, "--contract", contract)
    assert result.returncode == 1 and "Contracts: 0 kept, 1 broken." in result.stdout, result.stdout + result.stderr
    assert reported in result.stdout
