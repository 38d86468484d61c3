"""Which earlier cell bound a variable, read from what the kernel executed.

``%%train`` names the objects it took from the notebook rather than its own cell, with the cell
that made them ("val_loader (cell 7)"), so a leftover is recognised at a glance. The answer comes
from the cell sources in the kernel's history (``CellHistory``): the newest cell that binds the
name at its top level (an assignment, ``for``/``with`` target, import, ``def`` or ``class``; a
``%%train`` cell's body counts). Cells that raised count too: a ``%%train`` cell whose training
failed has still run its body. None when no cell says so (a name made by ``exec``): the header
then says "from the notebook".
"""

from __future__ import annotations

import ast
from typing import Callable

from .cell_history import CellHistory

CELL_MAGIC_CALLS = ("run_cell_magic",)


def defining_cells(shell) -> Callable[[str], int | None]:
    """``name -> execution count`` over this kernel's history as it is now."""
    cells = CellHistory.of(shell).cells()
    parsed: dict[int, set[str]] = {}

    def python(source: str) -> str:
        try:
            return shell.transform_cell(source)
        except Exception:  # IPython's transformers reject some odd input: that cell binds nothing we see
            return ""

    def defined_in(name: str) -> int | None:
        for index in range(len(cells) - 1, -1, -1):
            if index not in parsed:
                parsed[index] = bound_names(python(cells[index].source), python)
            if name in parsed[index]:
                return cells[index].execution_count
        return None
    return defined_in


def bound_names(code: str, python: Callable[[str], str]) -> set[str]:
    """The names ``code`` binds at its top level, ``%%train`` bodies (turned into Python by
    ``python``) included."""
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

    def __init__(self):
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
    """The bodies of ``get_ipython().run_cell_magic('train', line, body)`` calls: a ``%%train``
    cell's set-up code, as IPython turned the cell into Python."""
    bodies = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in CELL_MAGIC_CALLS and len(node.args) == 3
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
                and node.args[0].value == "train"):
            bodies.append(node.args[2].value)
    return bodies
