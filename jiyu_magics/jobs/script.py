"""The text of an exported job script: its header, cell separators and readable literals.

The script is a jupytext "percent" script (``# %%`` cell markers), so editors open it as
cells, and every cell says where it came from.
"""

from __future__ import annotations

import ast

from .. import __version__

HEADER = '''\
#!/usr/bin/env python3
# Exported by jiyu {version} from {origin}.
# Edit the notebook and export again rather than this file. The cells run in order as this
# script's top-level code; get_ipython() is a headless IPython shell bound to this module, so
# magics (%%train included) behave as in the notebook.
import os as _jiyu_os
import sys as _jiyu_sys

_jiyu_os.environ.setdefault("MPLBACKEND", "Agg")  # no display in a job: figures render off-screen


def _jiyu_headless_shell():
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # ranks must not share IPython's history database
    return InteractiveShell.instance(config=config, user_module=_jiyu_sys.modules[__name__])


_jiyu_headless_shell()
'''


def header(origin: str) -> str:
    return HEADER.format(version=__version__, origin=origin)


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


def cell_marker(title: str, kind: str = "") -> str:
    return f"# %% {('[' + kind + '] ') if kind else ''}{title}".rstrip()
