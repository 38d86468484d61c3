"""``%runs``: runs side by side in the notebook, as the panel's Compare page shows them."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.display import display


@magics_class
class RunsMagics(Magics):
    @line_magic
    def runs(self, line: str = ""):
        """Compare runs: their training loss overlaid on one chart (smoothed, log scale when
        the losses span more than 30x) and a table of parameters (``-p`` values), training
        options and final/best metrics, the parameters that differ between the runs marked.

            %runs compare ID ID ...    the given runs (ids or unique prefixes)
            %runs compare              the 50 most recent runs

        For your own analysis, ``jiyu_magics.runs(ID, ...)`` returns the same table as a pandas
        DataFrame (a list of dicts without pandas).
        """
        from ..core.run_comparison import compare
        from ..core.store.run_row import UnknownRun
        from ..views.compare_view import compare_html, compare_text

        words = line.split()
        if not words or words[0] != "compare":
            raise UsageError("usage: %runs compare [ID ...] (see %runs?)")
        try:
            records, curves = compare(words[1:] or None)
        except UnknownRun as error:
            raise UsageError(str(error)) from None
        if not records:
            raise UsageError("no runs to compare yet")
        display({"text/html": compare_html(records, curves), "text/plain": compare_text(records)}, raw=True)


MAGICS = [RunsMagics]
