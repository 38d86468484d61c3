"""The text of an exported job script: its header, cell separators and readable literals.

The script is a jupytext "percent" script (``# %%`` cell markers), so editors open it as
cells, and every cell says where it came from. Each code cell after the first begins with a
stop point: a job asked to stop ends there, cleanly, instead of running its later cells.
"""

from __future__ import annotations

import ast

from ..._version import __version__
from ...core.text import shown

HEADER = """\
#!/usr/bin/env python3
# Exported by jiyu {version} from {origin}.
# Edit the notebook and export again rather than this file. The cells run in order as this
# script's top-level code; get_ipython() is a headless IPython shell bound to this module, with
# jiyu_magics loaded, so magics (%%train included) behave as in the notebook. A job asked to
# stop ends at the next _jiyu_stop_point(...), before that cell, with exit status 0.
import os as _jiyu_os
import sys as _jiyu_sys

from jiyu_magics.core.processes.job_stop import stop_point as _jiyu_stop_point

_jiyu_os.environ.setdefault("MPLBACKEND", "Agg")  # no display in a job: figures render off-screen


def _jiyu_headless_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # ranks must not share IPython's history database
    shell = InteractiveShell.instance(config=config, user_module=_jiyu_sys.modules[__name__])
    # always: the notebook may have loaded it through an IPython profile, not %load_ext
    shell.extension_manager.load_extension("jiyu_magics")
    return shell


_jiyu_headless_shell()
"""


# After a cell that clears the namespace (``%reset -f``): the script's names went with the
# user's, and the next stop point (or a best-effort cell's error report) would be a NameError.
REBIND_AFTER_RESET = (
    "import sys as _jiyu_sys  # the reset above cleared the script's own names too\n"
    "from jiyu_magics.core.processes.job_stop import stop_point as _jiyu_stop_point"
)


def header(origin: str) -> str:
    """The script's first lines; ``origin`` (a file name, which may hold a newline) is shown
    escaped: it must stay inside its comment."""
    return HEADER.format(version=__version__, origin=shown(origin))


def readable_literal(text: str) -> str:
    """A string literal a person can read: a multi-line body as a triple-quoted block rather
    than one line of ``\\n`` escapes, whenever that spells exactly the same string."""
    if "\n" in text.rstrip("\n") and not any(c in text for c in ("'''", "\\", "\r")) and not text.endswith("'"):
        literal = "'''\\\n" + text + "'''"
        if ast.literal_eval(literal) == text:
            return literal
    return repr(text)


def comment_block(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines()] or ["#"]


def stop_point(label: str) -> str:
    return f"_jiyu_stop_point({label!r})"


def cell_marker(title: str, kind: str = "") -> str:
    """``# %% cell 3 (tags: ...)``: one comment line, whatever a tag holds."""
    return f"# %% {('[' + kind + '] ') if kind else ''}{shown(title)}".rstrip()


def best_effort_cell(code: str, label: str) -> str:
    """A replayed cell that may fail where the kernel did not: run as its own code object (so
    its names land in the script's globals as usual) and, if it raises, say so and go on."""
    return (
        f"try:\n    exec(compile({readable_literal(code.rstrip(chr(10)) + chr(10))}, {label!r}, 'exec'), globals())\n"
        f"except Exception as _jiyu_error:\n"
        f"    print(f'[jiyu] {label} raised {{type(_jiyu_error).__name__}}: {{_jiyu_error}} here; skipped "
        f"(it ran in the kernel)', file=_jiyu_sys.stderr)"
    )
