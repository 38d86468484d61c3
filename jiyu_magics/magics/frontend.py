"""Which front-end the magics draw for."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.runs.launch_context import LaunchContext


def in_notebook(shell, context: LaunchContext) -> bool:
    """True in a Jupyter kernel (HTML and widgets render), False in terminal IPython.
    ``JIYU_UI=text`` (``context.text_ui``, read where the magic was called) forces text
    output, for front-ends that cannot show widgets."""
    if context.text_ui:
        return False
    return type(shell).__name__ == "ZMQInteractiveShell"
