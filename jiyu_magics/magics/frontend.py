"""Which front-end the magics draw for."""

from __future__ import annotations

import os

TEXT_UI_ENV = "JIYU_UI"


def in_notebook(shell) -> bool:
    """True in a Jupyter kernel (HTML and widgets render), False in terminal IPython.
    ``JIYU_UI=text`` forces text output, for front-ends that cannot show widgets."""
    if os.environ.get(TEXT_UI_ENV, "").lower() == "text":
        return False
    return type(shell).__name__ == "ZMQInteractiveShell"
