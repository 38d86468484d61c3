"""Which earlier cell bound a variable, read from what the kernel executed.

``%%train`` names the objects it took from the notebook rather than its own cell, with the cell
that made them ("val_loader (In [7])"), so a leftover is recognised at a glance. The answer comes
from the cell sources in the kernel's history (``CellHistory``): the newest cell that binds the
name at its top level (an assignment, ``for``/``with`` target, import, ``def`` or ``class``; a
``%%train`` cell's body counts). Cells that raised count too: a ``%%train`` cell whose training
failed has still run its body. None when no cell says so (a name made by ``exec``): the header
then says "from the notebook".
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

from .cell_history import CellHistory

CODE_CELL_MAGICS = ("train", "time", "capture")  # cell magics whose body binds names in the notebook
CODE_LINE_MAGICS = ("time",)


def defining_cells(shell) -> Callable[[str], int | None]:
    """``name -> execution count`` over this kernel's history as it is now."""
    cells = CellHistory.of(shell).cells()

    def defined_in(name: str) -> int | None:
        return next((cell.execution_count for cell in reversed(cells) if name in names_bound_by(cell.source)), None)

    return defined_in


@functools.lru_cache(maxsize=4096)
def names_bound_by(source: str) -> frozenset[str]:
    """A cell's top-level names, once per distinct source: each ``%%train`` asks again."""
    return frozenset(bound_names(_python(source), _python))


def _python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # IPython's transformers reject some odd input: that cell binds nothing we see
        return ""


def bound_names(code: str, python: Callable[[str], str]) -> set[str]:
    """The names ``code`` binds at its top level, the code of ``%%train``, ``%%time`` and the
    like (turned into Python by ``python``) included."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    bindings = _Bindings()
    bindings.visit(tree)
    for body in _cell_magic_bodies(tree):
        bindings.names |= bound_names(python(body), python)
    return bindings.names


class _Bindings(ast.NodeVisitor):
    """Top-level bindings: blocks (if/for/with/try) count; function, class and lambda bodies
    and comprehensions have scopes of their own and do not."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.names.add(node.id)

    def visit_FunctionDef(self, node) -> None:
        self.names.add(node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Import(self, node) -> None:
        self.names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)

    visit_ImportFrom = visit_Import

    def visit_Lambda(self, node) -> None:
        pass

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda


def _cell_magic_bodies(tree: ast.Module) -> list[str]:
    """The code of magics that run it in the notebook's namespace, as IPython turned the cell
    into Python: ``get_ipython().run_cell_magic('train', line, body)`` (a ``%%train`` cell's
    set-up; ``%%time``, ``%%capture``) and ``run_line_magic('time', code)``."""
    bodies = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(args) < len(node.args):  # an argument that is not a literal string
            continue
        magic = args[0] if args else None
        if node.func.attr == "run_cell_magic" and len(args) == 3 and magic in CODE_CELL_MAGICS:
            bodies.append(args[2])
        elif node.func.attr == "run_line_magic" and len(args) == 2 and magic in CODE_LINE_MAGICS:
            bodies.append(args[1])
    return bodies
