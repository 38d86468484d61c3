"""What this kernel actually executed, cell by cell, with whether each cell raised: the input
of ``jobs.export_history`` (``%%train --nproc`` exports the kernel's history plus the current
cell). IPython's ``In`` list has the sources but not the outcomes, so a ``post_run_cell`` hook
records them from the moment the extension loads.

A cell that clears the kernel's namespace ends the history: the ranks start from where the
kernel's namespace starts again, and never replay the cells the user meant to forget (nor the
reset itself, which in a rank's headless shell would wipe the job script's own names). IPython
has no reset event, so the namespace is watched: ``%reset`` (``-f``, ``--aggressive``,
``get_ipython().reset()``) rebuilds it without the hidden marker put there at load, and
``%reset -s`` or a ``%reset_selective`` that matches every name leaves none of the user's names
where there were some. Among the cells that ran before the extension loaded, a ``%reset`` is
found in their source. ``del x`` and a ``%reset_selective`` of some names keep the history: the
ranks replay those cells too, and so delete what the kernel deleted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the exporter loads with the first cell recorded, not with %load_ext
    from IPython.core.interactiveshell import InteractiveShell

    from ..jobs import ExecutedCell

ATTRIBUTE = "_jiyu_cell_history"
_ABSENT = object()
MARKER = "_jiyu_namespace"  # hidden from %who; IPython's reset() rebuilds the namespace without it


class CellHistory:
    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.first_recorded = shell.execution_count  # cells before this ran before we listened
        self.recorded: list[ExecutedCell] = []
        self.last_run: float | None = None  # when the last recorded cell finished (wall clock)
        self.had_names = False  # whether the user's namespace held names when the cell started
        self.setup_ran = False  # the running cell is a %%train whose set-up body ran
        self._mark_namespace()
        shell.events.register("pre_run_cell", self.before)
        shell.events.register("post_run_cell", self.record)

    @classmethod
    def of(cls, shell) -> CellHistory:
        """The shell's one recorder (loading the extension twice must not record twice)."""
        history = getattr(shell, ATTRIBUTE, None)
        if history is None:
            history = cls(shell)
            setattr(shell, ATTRIBUTE, history)
        return history

    def close(self) -> None:
        """Stop recording (the next ``of`` starts a new history)."""
        self.shell.events.unregister("pre_run_cell", self.before)
        self.shell.events.unregister("post_run_cell", self.record)
        if getattr(self.shell, ATTRIBUTE, None) is self:
            delattr(self.shell, ATTRIBUTE)

    def before(self, info=None) -> None:
        self.had_names = self._user_names()

    def record(self, result) -> None:
        if self._namespace_cleared():
            self.forget()  # the cell that cleared it is not replayed either
            self.setup_ran = False
        elif getattr(result.info, "store_history", True) and result.info.raw_cell.strip():
            from ..jobs import ExecutedCell

            cell = ExecutedCell.from_result(result)
            cell.setup_ran, self.setup_ran = self.setup_ran and not cell.succeeded, False
            self.recorded.append(cell)
            self.last_run = time.time()

    def forget(self) -> None:
        """Nothing before now is replayed: neither recorded cells nor those in ``In``."""
        self.recorded.clear()
        self.first_recorded = 0
        self._mark_namespace()

    def cells(self) -> list[ExecutedCell]:
        """Every executed cell in order since the namespace was last cleared. Cells from before
        the extension loaded come from ``In``; their outcome was not seen, so they count as
        succeeded, and a ``%reset`` among them is found in their source."""
        from ..jobs import ExecutedCell
        from ..jobs.export.cell_rules import clears_namespace

        inputs = self.shell.user_ns.get("In", [])
        earlier = [
            ExecutedCell(source, count)
            for count, source in enumerate(inputs[: self.first_recorded])
            if count and source.strip()
        ]
        last_reset = max((i for i, cell in enumerate(earlier) if clears_namespace(cell.source)), default=-1)
        return earlier[last_reset + 1 :] + list(self.recorded)

    # -- the namespace -------------------------------------------------------------------------
    def _namespace_cleared(self) -> bool:
        return MARKER not in self.shell.user_ns or (self.had_names and not self._user_names())

    def _user_names(self) -> bool:
        """Whether the namespace holds a name ``%who`` would list (stops at the first one)."""
        hidden, ns = self.shell.user_ns_hidden, self.shell.user_ns
        return any(not name.startswith("_") and value is not hidden.get(name, _ABSENT) for name, value in ns.items())

    def _mark_namespace(self) -> None:
        self.shell.push({MARKER: True}, interactive=False)
