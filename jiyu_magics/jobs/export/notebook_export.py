"""Notebook → job script.

A notebook (read as JSON: ``notebook_file``) or a live kernel's history becomes one Python script: IPython's
own input transformer turns each cell into Python, the commands a job cannot or must not run
are left out with a comment (see ``cell_rules``), parameters (``-p``/``-y``/``-f``: ``params``) are
injected after the ``parameters`` cell (as papermill does), and the script runs the cells under a headless
IPython shell so magics behave as in the notebook.

IPython is imported when a cell is transformed, never at import: the server and the CLI import
this module cheaply, and the exporter never starts a kernel.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.did_you_mean import suggestion
from ...core.runs.line_map import LineMap, MappedCell
from ...core.text import BadPath, utf8_path
from ..job_error import JobError
from . import cell_rules, job_hazards
from . import script_text as script
from .notebook_file import read_cells
from .params import assignment_lines, check_params

# Where IPython syntax can appear: escapes at a line start (`!cmd`, `%magic`, `?obj`, `/f x`),
# assigned from (`x = !cmd`, `x = %magic`), help at a line end (`obj?`), pasted prompts. Cells
# without any are plain Python and skip the transformer, which re-tokenizes a cell once per
# transform (most of the export's time).
MAYBE_IPYTHON = re.compile(r"^\s*[!%?/,;]|=\s*[!%]|\?\s*$|^(>>>|In \[)", re.MULTILINE)


@dataclass
class SourceCell:
    """One cell to export: from a notebook (``index``, 0-based) or from a kernel's history."""

    source: str
    kind: str = "code"  # code | markdown | raw
    index: int | None = None
    execution_count: int | None = None
    tags: frozenset[str] = frozenset()
    failed: bool = False  # raised when it ran in the kernel (history only)
    name: str | None = None  # how to call a history cell that has no execution count
    best_effort: bool = False  # replayed set-up: an error is reported and the script goes on

    @property
    def label(self) -> str:
        count = f"In [{self.execution_count}]" if self.execution_count is not None else ""
        if self.index is None:
            return count or self.name or "a cell"
        return f"cell {self.index + 1}" + (f" ({count})" if count else "")


@dataclass
class ExecutedCell:
    """A cell as a live kernel ran it; ``from_result`` reads IPython's ``ExecutionResult``
    (as the ``post_run_cell`` event hands it over) without importing IPython."""

    source: str
    execution_count: int | None = None
    succeeded: bool = True
    setup_ran: bool = False  # a %%train cell that raised after its set-up body ran (training refused or failed)

    @classmethod
    def from_result(cls, result: Any) -> ExecutedCell:
        return cls(result.info.raw_cell, result.execution_count, bool(result.success))


@dataclass
class Export:
    script: str
    origin: str
    code_cells: int  # code cells that made it into the script
    left_out: list[str] = field(default_factory=list)  # one line per cell or command left out
    params: dict[str, Any] = field(default_factory=dict)
    pending: Any = None  # the code cell being rendered, for the line map
    warnings: list[str] = field(default_factory=list)  # what will likely block or fail in a job
    trains: bool = False  # a %%train/%train cell or a fit(...) call is in it
    line_map: list[MappedCell] = field(default_factory=list)  # where each code cell's lines went
    parameter_names: list[str] = field(default_factory=list)  # what the parameters cell sets

    def write(self, path: str | os.PathLike) -> Path:
        """Written whole (temp file + rename): a job never starts from half a script. The line
        map goes beside it (``job.map.json`` for ``job.py``): stacks and tracebacks name cells."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.script, encoding="utf-8")
        os.replace(tmp, path)
        self.lines().write(path.with_suffix(".map.json"))
        return path

    def lines(self, script: str = "job.py") -> LineMap:
        return LineMap(script, self.line_map, self.parameter_names)


def export_notebook(path: str | os.PathLike, params: Mapping[str, Any] | None = None) -> Export:
    """The job script of a ``.ipynb`` file; ``params`` override the ``parameters`` cell."""
    try:
        path = Path(utf8_path(Path(path).expanduser(), "notebook"))
    except BadPath as error:
        raise JobError(str(error)) from None
    export = build(read_notebook(path), params, origin=str(path.resolve()))
    if not export.code_cells:
        raise JobError(f"{path} has no code to run (a new notebook not saved yet? save it, then submit)")
    return export


def export_history(
    cells: Iterable[ExecutedCell | str],
    params: Mapping[str, Any] | None = None,
    *,
    current: str | None = None,
    origin: str = "a live kernel's history",
    best_effort: bool = False,
) -> Export:
    """The job script of what a kernel executed, in order; cells that raised are left out.
    ``current`` is the cell being run now (``%%train --nproc``), appended last. With
    ``best_effort`` a history cell that raises in the script (it used what only the kernel
    has, such as an earlier training's result) is reported on stderr and skipped; the current
    cell still must succeed."""
    sources = []
    for position, cell in enumerate(cells, 1):
        cell = ExecutedCell(cell) if isinstance(cell, str) else cell
        sources.append(
            SourceCell(
                cell.source,
                execution_count=cell.execution_count,
                failed=not cell.succeeded,
                name=f"history cell {position}",
                best_effort=best_effort,
            )
        )
    if current is not None:
        sources.append(SourceCell(current, name="the current cell"))
    return build(sources, params, origin=origin)


def read_notebook(path: Path) -> list[SourceCell]:
    """The notebook's cells, read as JSON (``notebook_file``: no nbformat import)."""
    metadata, cells = read_cells(path)
    language = _field(metadata, "kernelspec", "language") or _field(metadata, "language_info", "name")
    if isinstance(language, str) and language and language.lower() != "python":
        raise JobError(f"{path} is a {language} notebook; jobs run Python notebooks")
    return [
        SourceCell(cell["source"], cell["cell_type"], index, cell["execution_count"], cell["tags"])
        for index, cell in enumerate(cells)
    ]


def _field(metadata: dict, section: str, key: str) -> Any:
    value = metadata.get(section)
    return value.get(key) if isinstance(value, dict) else None


def build(cells: Sequence[SourceCell], params: Mapping[str, Any] | None, origin: str) -> Export:
    params = check_params(params)
    transformer = _transformer()
    out = [script.header(origin)]
    export = Export("", origin, 0, params=params)
    parameters_cell = next((c for c in cells if cell_rules.PARAMETERS_TAG in c.tags and c.kind == "code"), None)
    if params and parameters_cell is None:
        out += _injected(params, "no cell is tagged 'parameters': injected first, as papermill does")
    if parameters_cell is not None:
        export.parameter_names = sorted(assigned_names(parameters_cell.source, transformer))
    export.parameter_names += sorted(set(params) - set(export.parameter_names))
    lines = sum(part.count("\n") + 1 for part in out)  # the script's lines so far
    for cell in cells:
        rendered = _render(cell, transformer, export)
        if export.pending is not None:
            export.line_map.append(_mapped(cell, export.pending, lines))
            export.pending = None
        out += rendered
        lines += sum(part.count("\n") + 1 for part in rendered)
        if cell is parameters_cell and params:
            _check_known(params, cell, transformer)
            injected = _injected(params, f"overrides of {cell.label} (jiyu -p)")
            out += injected
            lines += sum(part.count("\n") + 1 for part in injected)
    export.script = "\n".join(out).rstrip() + "\n"
    _check_compiles(export.script, origin)
    return export


def _render(cell: SourceCell, transformer, export: Export) -> list[str]:
    if cell.kind == "markdown":
        return ["", script.cell_marker(cell.label, "markdown"), *script.comment_block(cell.source)]
    if cell.kind != "code":
        return [
            "",
            script.cell_marker(f"{cell.label}: {cell.kind} cell, not run", cell.kind),
            *script.comment_block(cell.source),
        ]
    if cell_rules.SKIP_TAG in cell.tags:
        return _left_out(export, cell, "tagged jiyu:skip")
    if cell.failed:
        return _left_out(export, cell, "it raised an error when it ran in the kernel")
    if not cell.source.strip():
        return []
    code = python_of(cell, transformer, export)
    export.code_cells += 1
    job_hazards.scan(code, cell.label, export)
    tags = sorted(cell.tags - {cell_rules.KEEP_TAG})
    title = cell.label + (f" (tags: {', '.join(tags)})" if tags else "")
    stop = [script.stop_point(cell.label)] if export.code_cells > 1 else []
    rebind = [script.REBIND_AFTER_RESET] if cell_rules.clears_namespace(code) else []
    if cell.best_effort:
        export.pending = _Pending(code, 0, compiled_as=cell.label)
        return [
            "",
            script.cell_marker(title + " (best effort)"),
            *stop,
            script.best_effort_cell(code, cell.label),
            *rebind,
        ]
    export.pending = _Pending(code, 2 + len(stop))
    return ["", script.cell_marker(title), *stop, code.rstrip("\n"), *rebind]


@dataclass
class _Pending:
    """A code cell just rendered: its Python, and where in the rendered parts its code begins."""

    code: str
    lines_before: int  # script lines of the rendered parts before the code
    compiled_as: str | None = None  # its own file name (a best-effort cell's label)


def _mapped(cell: SourceCell, pending: _Pending, lines_so_far: int) -> MappedCell:
    """Each line of the cell's Python, back to the cell line it came from: equal lines pair up,
    a rewritten run of lines (a magic turned into a call) pairs line by line where the counts
    agree, else with its first line."""
    source, code = cell.source.splitlines(), pending.code.splitlines()
    cell_lines: list[int | None] = [None] * len(code)
    matcher = difflib.SequenceMatcher(None, source, code, autojunk=False)
    for tag, s0, s1, c0, c1 in matcher.get_opcodes():
        if tag == "delete":
            continue
        for i in range(c0, c1):
            same_size = tag == "equal" or (s1 - s0) == (c1 - c0)
            cell_lines[i] = (s0 + (i - c0) if same_size else s0) + 1 if s1 > s0 else None
    start = 1 if pending.compiled_as else lines_so_far + pending.lines_before + 1
    return MappedCell(cell.label, start, cell_lines, cell.source, file=pending.compiled_as)


def _left_out(export: Export, cell: SourceCell, why: str) -> list[str]:
    export.left_out.append(f"{cell.label}: {why}")
    return ["", f"# {cell.label} left out: {why}"]


def python_of(cell: SourceCell, transformer, export: Export) -> str:
    """The cell as Python, with the commands a job leaves out replaced by comments."""
    code, _ = _CellFilter(cell, transformer, export).python(cell.source)
    return code


class _CellFilter:
    """Applies ``cell_rules`` to one cell's transformed code, and to the bodies of the
    ``%%time``-like cell magics in it (they run notebook code themselves)."""

    def __init__(self, cell: SourceCell, transformer, export: Export):
        self.cell, self.transformer, self.export = cell, transformer, export
        self.keep = cell_rules.KEEP_TAG in cell.tags

    def python(self, source: str) -> tuple[str, bool]:
        """``source`` as Python with commands left out, and whether any was left out."""
        code = self.transformer.transform_cell(source) if MAYBE_IPYTHON.search(source) else _ended(source)
        if "get_ipython" not in code:
            return code, False  # plain Python: the whole script's compile checks it
        lines, edits = code.splitlines(), []
        for node in _statements(self._parse(code).body):
            command = cell_rules.command_of(node) if isinstance(node, (ast.Expr, ast.Assign)) else None
            edit = self._edit(node, command) if command and _owns_its_lines(node, lines) else None
            if edit:
                edits.append((node, *edit))
        for node, text, _ in sorted(edits, key=lambda e: -e[0].lineno):
            lines[node.lineno - 1 : node.end_lineno] = [text]
        return "\n".join(lines) + "\n", any(left_out for _, _, left_out in edits)

    def _edit(self, node: ast.stmt, command: cell_rules.Command) -> tuple[str, bool] | None:
        """The text replacing the statement and whether that leaves something out; None to
        keep the statement as it is."""
        reason = command.reason_to_leave_out(self.keep)
        if reason == cell_rules.LOADED_BY_SCRIPT:  # nothing the user loses: not worth a note
            return (
                f"{' ' * node.col_offset}{'pass  ' if node.col_offset else ''}# jiyu: {command.text} ({reason})",
                False,
            )
        if reason:
            self.export.left_out.append(f"{self.cell.label}: {command.text.splitlines()[0]} ({reason})")
            return _comment_for(node, command, reason), True
        if command.kind != "cell" or node.col_offset:
            return None
        body, changed = command.body, False
        if command.name in cell_rules.BODY_RUNNING_MAGICS:
            filtered, changed = self.python(body)
            body = filtered if changed else body
        return _readable_cell_magic(node, command, body), changed

    def _parse(self, code: str) -> ast.Module:
        try:
            return ast.parse(code)
        except SyntaxError as error:
            raise JobError(f"{self.cell.label} is not valid Python: {error.msg} (line {error.lineno})") from None


def _ended(source: str) -> str:
    """What the transformer returns for plain Python: the source, ending in a newline."""
    return source if source.endswith("\n") else source + "\n"


def _statements(body: list[ast.stmt]):
    """Every statement, nested ones included, without visiting expressions (the transformer
    only ever writes its calls as whole statements)."""
    stack = list(reversed(body))  # popped in source order
    while stack:
        node = stack.pop()
        yield node
        nested: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, name, ()):
                nested += child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) else [child]
        stack += reversed(nested)


def _comment_for(node: ast.stmt, command: cell_rules.Command, reason: str) -> str:
    hint = "" if reason.startswith("job control") else "; tag the cell jiyu:keep to run it"
    text = command.text.splitlines()[0]
    indent = " " * node.col_offset
    return f"{indent}{'pass  ' if node.col_offset else ''}# jiyu: left out {text} ({reason}{hint})"


def _readable_cell_magic(node: ast.stmt, command: cell_rules.Command, body: str) -> str:
    target = "".join(ast.unparse(t) + " = " for t in getattr(node, "targets", ()))
    return f"{target}get_ipython().run_cell_magic({command.name!r}, {command.args!r}, {script.readable_literal(body)})"


def _owns_its_lines(node: ast.stmt, lines: list[str]) -> bool:
    """The statement alone on its lines, so replacing those lines removes nothing else."""
    before = lines[node.lineno - 1][: node.col_offset]
    end_line = node.lineno if node.end_lineno is None else node.end_lineno  # None only in hand-built trees
    after = lines[end_line - 1][node.end_col_offset :]
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


def _injected(params: Mapping[str, Any], why: str) -> list[str]:
    return ["", script.cell_marker(f"injected parameters: {why}"), *assignment_lines(params)]


def assigned_names(source: str, transformer=None) -> set[str]:
    """The names a cell assigns at its top level (``lr = 0.1``, ``epochs: int = 2``): what a
    ``parameters`` cell sets. Empty for a cell that is not valid Python."""
    try:
        tree = ast.parse((transformer or _transformer()).transform_cell(source))
    except SyntaxError:
        return set()
    targets = [
        t
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
    ]
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


def notebook_parameter_names(path: Path) -> list[str] | None:
    """The names the notebook's cell tagged ``parameters`` sets, in its order; None when the
    notebook cannot be read or has no such cell."""
    try:
        _, cells = read_cells(path)
    except JobError:
        return None
    cell = next((c for c in cells if cell_rules.PARAMETERS_TAG in c["tags"] and c["cell_type"] == "code"), None)
    if cell is None:
        return None
    names = assigned_names(cell["source"])
    return sorted(names, key=lambda name: cell["source"].find(name))


def _check_known(params: Mapping[str, Any], cell: SourceCell, transformer) -> None:
    """A ``-p`` name the parameters cell does not define is almost always a typo, and a typo
    found at submit time saves a wasted run."""
    try:
        ast.parse(transformer.transform_cell(cell.source))
    except SyntaxError:
        return  # the script's compile reports it, by cell and line
    defined = assigned_names(cell.source, transformer)
    unknown = sorted(set(params) - defined)
    if unknown:
        raise JobError(
            f"unknown parameter {', '.join(unknown)}: {cell.label} (tagged parameters) defines "
            f"{', '.join(sorted(defined)) or 'nothing'}{suggestion(unknown, defined)}"
        )


def _check_compiles(text: str, origin: str) -> None:
    """One compile of the whole script finds syntax errors, and errors only the compiler sees
    (``return`` or ``await`` outside a function), reported by cell and line in that cell."""
    try:
        compile(text, origin, "exec", dont_inherit=True)
    except SyntaxError as error:
        above = text.splitlines()[: error.lineno or 0]
        start = next((i for i in range(len(above) - 1, -1, -1) if above[i].startswith("# %% ")), None)
        where = above[start][5:].split(" (tags:")[0] if start is not None else "the script"
        first = start + 1 if start is not None else 0
        if start is not None and first < len(above) and above[first].startswith("_jiyu_stop_point("):
            first += 1  # the cell's code begins after its stop point
        line = (error.lineno or 0) - first
        raise JobError(f"{where} is not valid Python: {error.msg} (line {line})") from None


def _transformer():
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()
