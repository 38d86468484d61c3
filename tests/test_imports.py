"""Importing the package, its core and the GPU/server-facing modules must not import torch:
torch costs seconds and a careless import can create a CUDA context in the user's kernel."""

import subprocess
import sys

import pytest

from .conftest import ROOT

LIGHT_MODULES = [
    "jiyu_magics",
    "jiyu_magics.core",
    "jiyu_magics.core.gpu.snapshot",
    "jiyu_magics.core.gpu.doctor",
    "jiyu_magics.core.store.run_store",
    "jiyu_magics.core.events.log",
    "jiyu_magics.views.gpu_table",
    "jiyu_magics.cli",
    "jiyu_magics.commands.gpu_commands",
    "jiyu_magics.magics.gpu_magics",
    "jiyu_magics.magics.train_magic",
    "jiyu_magics.widgets.train_dashboard",
    "jiyu_magics.views.train_text",
]


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_import_leaves_torch_and_nvml_unloaded(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "print(sorted(m for m in ('torch', 'pynvml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"{module} imported {out.stdout.strip()}"


def test_core_never_imports_view_or_framework_packages():
    """core/ is the bottom layer: no torch, IPython, ipywidgets or tornado, even transitively."""
    code = (
        "import sys, pkgutil, importlib, jiyu_magics.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'jiyu_magics.core.'): importlib.import_module(m.name)\n"
        "print(sorted(m for m in ('torch', 'IPython', 'ipywidgets', 'tornado') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_gpu_status_does_not_import_torch():
    code = "import sys, jiyu_magics.core.gpu.snapshot as g; g.snapshot(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("package", ["jiyu_magics.jobs", "jiyu_magics.train"])
def test_no_name_loaded_on_first_use_is_also_a_module_of_its_package(package):
    """Importing a submodule binds its name on the package, over a function of that name that
    ``__getattr__`` would load (``jobs.upkeep`` was a module once the first submit had imported
    it, and the server's upkeep failed from then on: issue 36)."""
    import importlib
    import pkgutil

    module = importlib.import_module(package)
    lazy = getattr(module, "_HOMES", None) or module.EXPORTS
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert sorted(set(lazy) & submodules) == []
