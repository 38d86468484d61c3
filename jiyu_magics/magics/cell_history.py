"""What this kernel actually executed, cell by cell, with whether each cell raised: the input
of ``jobs.export_history`` (``%%train --nproc`` exports the kernel's history plus the current
cell). IPython's ``In`` list has the sources but not the outcomes, so a ``post_run_cell`` hook
records them from the moment the extension loads."""

from __future__ import annotations

import time

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the exporter loads with the first cell recorded, not with %load_ext
    from ..jobs import ExecutedCell

ATTRIBUTE = "_jiyu_cell_history"


class CellHistory:
    def __init__(self, shell):
        self.shell = shell
        self.first_recorded = shell.execution_count  # cells before this ran before we listened
        self.recorded: list[ExecutedCell] = []
        self.last_run: float | None = None  # when the last recorded cell finished (wall clock)
        self.setup_ran = False  # the running cell is a %%train whose set-up body ran
        shell.events.register("post_run_cell", self.record)

    @classmethod
    def of(cls, shell) -> "CellHistory":
        """The shell's one recorder (loading the extension twice must not record twice)."""
        history = getattr(shell, ATTRIBUTE, None)
        if history is None:
            history = cls(shell)
            setattr(shell, ATTRIBUTE, history)
        return history

    def record(self, result) -> None:
        if getattr(result.info, "store_history", True) and result.info.raw_cell.strip():
            from ..jobs import ExecutedCell

            cell = ExecutedCell.from_result(result)
            cell.setup_ran, self.setup_ran = self.setup_ran and not cell.succeeded, False
            self.recorded.append(cell)
            self.last_run = time.time()

    def cells(self) -> list[ExecutedCell]:
        """Every executed cell in order. Cells from before the extension loaded come from
        ``In``; their outcome was not seen, so they count as succeeded."""
        from ..jobs import ExecutedCell

        inputs = self.shell.user_ns.get("In", [])
        earlier = [ExecutedCell(source, count) for count, source in enumerate(inputs[:self.first_recorded])
                   if count and source.strip()]
        return earlier + list(self.recorded)
