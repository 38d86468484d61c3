"""What in a notebook will likely block or misbehave once it runs as a job, said at submit time.

A job has no one at the keyboard: ``input()`` waits forever (or raises ``EOFError``) and an
interactive login (``notebook_login()``, ``wandb.login()``) never gets its token. And without a
training call (``%%train``, ``%train`` or ``fit(...)``), every process of a multi-process job
runs the whole notebook: the same work N times, all writing the same files.
"""

from __future__ import annotations

import ast
from typing import Protocol

from . import cell_rules


class Findings(Protocol):
    warnings: list[str]
    trains: bool


def scan(code: str, label: str, found: Findings) -> None:
    """Adds what ``code`` (a cell as Python, IPython syntax already transformed) holds."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return  # the whole script's compile reports it, by cell and line
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node)
        if name == "input":
            found.warnings.append(
                f"{label} calls input(): nobody can answer it in a job (it waits or raises "
                "EOFError); pass the value with -p instead"
            )
        elif name and name.endswith("login"):
            found.warnings.append(
                f"{label} calls {name}(): an interactive login never completes in a job; "
                "set its token in the environment instead (e.g. HF_TOKEN, WANDB_API_KEY)"
            )
        elif name == "fit" or _is_train_magic(node):
            found.trains = True


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_train_magic(call: ast.Call) -> bool:
    command = cell_rules.command_of(ast.Expr(call))
    return command is not None and command.kind in ("line", "cell") and command.name == "train"


def whole_notebook_per_process(nprocs: int) -> str:
    return (
        f"no %%train or fit call: each of the {nprocs} processes runs the notebook whole (the same work "
        f"{nprocs} times, writing the same files); use %%train --nproc or fit() for DDP, or --nproc 1"
    )
