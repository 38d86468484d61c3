"""The layers of ARCHITECTURE.md, as import-linter contracts in pyproject.toml: the package keeps
them, and each contract really breaks when a module imports across it (a contract that matches
nothing would pass forever). Each breaking import goes into a new module of a copy of the package,
so the cases do not depend on today's module names."""

from __future__ import annotations

import ast
import json
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
    (
        "layers",
        {"jobs/_probe.py": "import jiyu_magics.train\n"},
        "jiyu_magics.jobs is not allowed to import jiyu_magics.train",
    ),
    (
        "layers",
        {"core/_probe.py": "from jiyu_magics import views\n"},
        "jiyu_magics.core is not allowed to import jiyu_magics.views",
    ),
    (
        "acyclic",
        {"core/_probe_a.py": "from . import _probe_b\n", "core/_probe_b.py": "from . import _probe_a\n"},
        "No cycles are allowed in jiyu_magics.core.",
    ),
    ("core-pure", {"core/_probe.py": "import IPython\n"}, "jiyu_magics.core is not allowed to import IPython"),
    ("torch-in-train", {"core/_probe.py": "import torch\n"}, "jiyu_magics.core._probe -> torch"),
    ("ipython-in-notebook-adapters", {"views/_probe.py": "import IPython\n"}, "jiyu_magics.views._probe -> IPython"),
    ("ipywidgets-in-widgets", {"magics/_probe.py": "import ipywidgets\n"}, "jiyu_magics.magics._probe -> ipywidgets"),
    ("web-server-in-server", {"jobs/_probe.py": "from tornado import web\n"}, "jiyu_magics.jobs._probe -> tornado"),
    ("matplotlib-in-views", {"train/_probe.py": "import matplotlib\n"}, "jiyu_magics.train._probe -> matplotlib"),
    ("trackers-in-trackers", {"jobs/_probe.py": "import mlflow\n"}, "jiyu_magics.jobs._probe -> mlflow"),
    (
        "rank-side",
        {"ranks/rank_shell.py": "from . import agent\n"},
        "jiyu_magics.ranks.rank_shell is not allowed to import jiyu_magics.ranks.agent",
    ),
    (
        "layers",
        {"trackers/_probe.py": "from jiyu_magics.jobs import lifecycle\n"},
        "jiyu_magics.trackers is not allowed to import jiyu_magics.jobs",
    ),
]


def lint_imports(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package found in ``tree`` (its pyproject.toml and jiyu_magics/)."""
    assert LINT_IMPORTS.exists(), f"import-linter is not installed next to {sys.executable} (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def contract_ids() -> set[str]:
    return set(re.findall(r'^id = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE))


def test_the_package_keeps_every_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contract_ids())} kept, 0 broken." in result.stdout


def test_every_contract_has_an_import_that_breaks_it():
    assert contract_ids() == {case[0] for case in BREAKING_IMPORTS}


@pytest.mark.parametrize(
    "contract, modules, reported", BREAKING_IMPORTS, ids=[f"{c[0]}:{next(iter(c[1]))}" for c in BREAKING_IMPORTS]
)
def test_a_forbidden_import_breaks_its_contract(contract, modules, reported, tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(
        ROOT / "jiyu_magics", tmp_path / "jiyu_magics", ignore=shutil.ignore_patterns("__pycache__", "labextension")
    )
    for module, source in modules.items():
        (tmp_path / "jiyu_magics" / module).write_text(source)
    result = lint_imports(tmp_path, "--contract", contract)
    assert result.returncode == 1 and "Contracts: 0 kept, 1 broken." in result.stdout, result.stdout + result.stderr
    assert reported in result.stdout


def module_cycles(package_root: Path) -> list[list[str]]:
    """Every import cycle among the package's modules, package ``__init__`` files and
    function-level imports included (import-linter's ``acyclic_siblings`` compares siblings
    only: a package importing its own child which imports the package back passes it)."""
    code = (
        "import grimp, json, sys\n"
        "g = grimp.build_graph('jiyu_magics')\n"
        "mods = sorted(m for m in g.modules if m.startswith('jiyu_magics'))\n"
        "print(json.dumps({m: sorted(d for d in g.find_modules_directly_imported_by(m) "
        "if d.startswith('jiyu_magics')) for m in mods}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=package_root, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    graph = json.loads(out)
    return strongly_connected(graph)


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, [])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_cycle_at_any_depth():
    assert module_cycles(ROOT) == []


def test_a_package_importing_its_child_back_is_a_cycle(tmp_path):
    shutil.copytree(
        ROOT / "jiyu_magics", tmp_path / "jiyu_magics", ignore=shutil.ignore_patterns("__pycache__", "labextension")
    )
    views = tmp_path / "jiyu_magics" / "views"
    (views / "_probe.py").write_text("def f():\n    from . import format\n")
    init = views / "__init__.py"
    init.write_text(init.read_text() + "\nfrom . import _probe\n")
    (views / "format.py").write_text((views / "format.py").read_text() + "\n\ndef g():\n    from .. import views\n")
    assert ["jiyu_magics.views", "jiyu_magics.views._probe", "jiyu_magics.views.format"] in module_cycles(tmp_path)


# Who may read this process's environment (issue 38): the one reader of each kind of context and
# the entry points of the processes jiyu starts, each with its reason. Everything else is given
# the values it needs (a ``LaunchContext``, ``Settings``, a parameter). Writing the environment is
# no read (``os.environ[NAME] = ...``, or ``update``/``pop``/``setdefault`` whose value goes
# unused): it configures a library this process loads (matplotlib, MLflow) or what a child
# inherits (a forked rank, an exec'd torchrun). A child's own environment is built by
# ``child_environment``. Another process's environment (``psutil.Process.environ``) is not ours.
ENVIRONMENT_READERS = {
    "jiyu_magics/core/runs/launch_context.py": "LaunchContext.from_environ: a launcher's variables, read once "
    "by each entry point (LAUNCH_CONTEXT_READERS)",
    "jiyu_magics/core/settings.py": "Settings.from_environ: what a person sets, read at each use, because the "
    "server's load, %env and the tests change it while one process runs",
    "jiyu_magics/core/environment.py": "child_environment: this process's environment copied for a child "
    "it starts (subprocess env=), no setting of ours read",
    "jiyu_magics/jobs/process/node_launch.py": "a Slurm node's entry point (main): Slurm's and torchrun's node "
    "variables, once, before it execs torchrun",
    "jiyu_magics/server/app.py": "the server extension's load: its options' defaults (JiyuApp traits)",
}
# Where a process reads its launcher's context from its own environment
# (``LaunchContext.from_environ()`` without a mapping): where a process, or a call into jiyu from
# outside it, starts. Everything past them is handed the context.
LAUNCH_CONTEXT_READERS = {
    "jiyu_magics/jobs/process/rank_worker.py": "a job's rank (main)",
    "jiyu_magics/ranks/worker.py": "a ranks pool's rank that torchrun started (serve)",
    "jiyu_magics/ranks/supervisor.py": "a ranks pool's supervisor (main), and each rank it forks",
    "jiyu_magics/train/engine.py": "fit: the entry of training in a user's script, when given no context",
    "jiyu_magics/magics/": "a magic's call: the kernel's entry point for a command (%env or a test may change "
    "the environment between calls)",
}
OS_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb"}
WRITES = {"update", "pop", "setdefault", "clear"}


def _module_name(path: Path, package: Path) -> str:
    return path.relative_to(package.parent).as_posix()


def _writes(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``node`` (``os.environ``) written, its value unused: a subscript stored or deleted, or a
    writing method called as a statement."""
    parent = parents.get(node)
    if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, (ast.Store, ast.Del)):
        return True
    call = parents.get(parent) if isinstance(parent, ast.Attribute) and parent.attr in WRITES else None
    return isinstance(call, ast.Call) and call.func is parent and isinstance(parents.get(call), ast.Expr)


def environment_reads(package: Path) -> list[str]:
    """Reads of this process's environment in the modules under ``package`` (``os.environ``,
    ``os.getenv``, ``os.environb``, under any name ``os`` is imported as, or imported from
    ``os``), as path:line from the package's folder on."""
    found: list[tuple[str, int]] = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        names = {"os"} | {
            alias.asname
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name == "os" and alias.asname
        }
        for node in ast.walk(tree):
            imported = isinstance(node, ast.ImportFrom) and node.module == "os"
            if imported and any(alias.name in OS_ENVIRONMENT for alias in node.names):  # type: ignore[union-attr]
                found.append((_module_name(path, package), node.lineno))
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in OS_ENVIRONMENT
                and isinstance(node.value, ast.Name)
                and node.value.id in names
                and not _writes(node, parents)
            ):
                found.append((_module_name(path, package), node.lineno))
    return [f"{module}:{line}" for module, line in sorted(found)]


def launch_context_reads(package: Path) -> list[str]:
    """``LaunchContext.from_environ()`` calls that read this process's environment (no mapping
    given) under ``package``, as path:line."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "from_environ"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "LaunchContext"
                and not node.args
                and not node.keywords
            ):
                found.append(f"{_module_name(path, package)}:{node.lineno}")
    return found


def _allowed(read: str, allowed: dict[str, str]) -> bool:
    module = read.partition(":")[0]
    return any(module == name or (name.endswith("/") and module.startswith(name)) for name in allowed)


def test_only_the_entry_points_read_the_environment():
    """Each process reads its environment once, where it starts, into a context it passes on;
    the modules past its entry point read none of their own (the training code included)."""
    package = ROOT / "jiyu_magics"
    assert [read for read in environment_reads(package) if not _allowed(read, ENVIRONMENT_READERS)] == []
    assert [read for read in launch_context_reads(package) if not _allowed(read, LAUNCH_CONTEXT_READERS)] == []


def test_every_allowed_reader_reads():
    """An entry of the allow-lists that no longer reads would let a read in there unseen."""
    package = ROOT / "jiyu_magics"
    reads, context_reads = environment_reads(package), launch_context_reads(package)
    assert [name for name in ENVIRONMENT_READERS if not any(_allowed(r, {name: ""}) for r in reads)] == []
    assert [name for name in LAUNCH_CONTEXT_READERS if not any(_allowed(r, {name: ""}) for r in context_reads)] == []


def test_the_check_sees_an_environment_read(tmp_path):
    package = tmp_path / "jiyu_magics"
    (package / "train").mkdir(parents=True)
    (package / "jobs").mkdir()
    (package / "train" / "_env_probe.py").write_text("import os\nrank = os.environ.get('RANK')\n")
    (package / "jobs" / "_env_probe.py").write_text(
        "import os as _os\n"
        "from os import getenv\n"
        "_os.environ['MPLBACKEND'] = 'Agg'\n"  # writes: no read
        "_os.environ.setdefault('A', '1')\n"
        "del _os.environ['A']\n"
        "run = _os.environ.pop('JIYU_RUN_ID', None)\n"  # a pop whose value is used reads
        "home = _os.getenv('JIYU_HOME')\n"
        "from ..core.runs.launch_context import LaunchContext\n"
        "context = LaunchContext.from_environ()\n"
        "given = LaunchContext.from_environ({'RANK': '0'})\n"  # a mapping given: nothing read
    )
    assert environment_reads(package) == [
        "jiyu_magics/jobs/_env_probe.py:2",
        "jiyu_magics/jobs/_env_probe.py:6",
        "jiyu_magics/jobs/_env_probe.py:7",
        "jiyu_magics/train/_env_probe.py:2",
    ]
    assert launch_context_reads(package) == ["jiyu_magics/jobs/_env_probe.py:9"]
    assert not _allowed("jiyu_magics/jobs/_env_probe.py:6", ENVIRONMENT_READERS)
    assert _allowed("jiyu_magics/magics/anything.py:1", LAUNCH_CONTEXT_READERS)


# The engine stays readable a piece at a time (issue 38): no module under train/ over this many
# lines, no function over this many from its ``def`` to its last line, docstring included.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 40


def oversized(package: Path) -> list[str]:
    """The modules under ``package`` longer than ``MAX_MODULE_LINES`` and the functions longer
    than ``MAX_FUNCTION_LINES``, each named with its length."""
    found = []
    for path in sorted(package.rglob("*.py")):
        source, name = path.read_text(), path.relative_to(package.parent.parent).as_posix()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_training_modules_and_functions_stay_short():
    assert oversized(ROOT / "jiyu_magics" / "train") == []


def test_the_check_sees_a_long_module_and_a_long_function(tmp_path):
    train = tmp_path / "jiyu_magics" / "train"
    train.mkdir(parents=True)
    body = "".join(f"    x{n} = {n}\n" for n in range(MAX_FUNCTION_LINES - 1))
    (train / "short.py").write_text(f"def fits():\n{body}")
    (train / "long.py").write_text(f"def f():\n{body}    return 0\n" + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES))
    assert oversized(train) == [
        f"jiyu_magics/train/long.py: {MAX_MODULE_LINES + 1} lines",
        f"jiyu_magics/train/long.py:1 f: {MAX_FUNCTION_LINES + 1} lines",
    ]


# SQL that writes a run's status: a new row, or an UPDATE naming the column. ``RunStore.update``
# builds its SET from the caller's columns and refuses ``status`` itself (tests/test_store.py).
STATUS_WRITES = re.compile(r"INSERT\s+(?:OR\s+\w+\s+)?INTO\s+runs\b|UPDATE\s+runs\s+SET\b[^\"']*\bstatus\s*=", re.I)


def status_writes(package: Path) -> list[str]:
    """Where the package writes a run's status other than ``core/store/transitions.py``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() == "core/store/transitions.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if STATUS_WRITES.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}")
    return found


def test_a_runs_status_is_written_only_by_the_state_machine():
    """Every status the store holds was written by ``transitions.arrive`` (born, restored) or
    ``transitions.move``: no other module inserts a run row or sets its status."""
    assert status_writes(ROOT / "jiyu_magics") == []


def test_the_check_sees_a_status_written_around_the_state_machine():
    probe = ROOT / "jiyu_magics" / "core" / "store" / "_status_probe.py"
    probe.write_text(
        "def f(db):\n    db.execute('INSERT OR REPLACE INTO runs (id, status) VALUES (?, ?)', ('a', 'lost'))\n"
        "    db.execute(\"UPDATE runs SET status = 'lost' WHERE id = ?\", ('a',))\n"
    )
    try:
        assert status_writes(ROOT / "jiyu_magics") == [f"{probe.relative_to(ROOT)}:{n}" for n in (2, 3)]
    finally:
        probe.unlink()


def test_every_jiyu_variable_the_package_names_is_documented():
    from jiyu_magics.core.environment import VARIABLES

    named = set()
    for path in (ROOT / "jiyu_magics").rglob("*.py"):
        named |= set(re.findall(r"\bJIYU_[A-Z0-9_]+\b", path.read_text()))
    assert named - {v.name for v in VARIABLES} == set()


# mypy over the package ([tool.mypy] in pyproject.toml), as `make test` runs it. Both runs share
# the checkout's cache (.mypy_cache): seconds when it is warm, about two minutes when it is cold.
# (error code, a probe module, the line mypy must report): all but the first are errors only under
# the configuration's strict_equality, warn_unused_ignores, check_untyped_defs, warn_return_any and
# no_implicit_reexport, so they show it is read.
TYPE_ERRORS = [
    ("return-value", "def f() -> int:\n    return 'one'\n", 2),
    ("comparison-overlap", "def f(x: int) -> bool:\n    return x == 'one'\n", 2),
    ("unused-ignore", "x: int = 1  # type: ignore[assignment]\n", 1),
    ("assignment", "def f():\n    x: int = 'one'\n", 2),
    ("no-any-return", "import json\n\n\ndef f(text: str) -> int:\n    return json.loads(text)\n", 5),
    ("attr-defined", "from jiyu_magics.core.store.database import HOME_ENV\n\nprint(HOME_ENV)\n", 1),
]


def mypy(tree: Path) -> subprocess.CompletedProcess:
    """mypy on the package found in ``tree`` (its pyproject.toml and jiyu_magics/)."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=540,
    )


def test_the_package_has_no_type_errors():
    result = mypy(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found in "), result.stdout


@pytest.mark.parametrize("code, source, line", TYPE_ERRORS, ids=[case[0] for case in TYPE_ERRORS])
def test_a_type_error_in_the_package_fails_the_check(code, source, line, tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(
        ROOT / "jiyu_magics", tmp_path / "jiyu_magics", ignore=shutil.ignore_patterns("__pycache__", "labextension")
    )
    (tmp_path / "jiyu_magics" / "core" / "_probe.py").write_text(source)
    result = mypy(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"jiyu_magics/core/_probe.py:{line}: error:" in result.stdout, result.stdout
    assert f"[{code}]" in result.stdout and "Found 1 error in 1 file" in result.stdout, result.stdout
