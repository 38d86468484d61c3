"""Sphinx configuration of the jiyu_magics documentation (``make docs``).

Pages are MyST Markdown; the reference pages are generated from the code at build time by
``_ext/jiyu_reference.py`` (CLI parsers, magic docstrings, REST routes and JSON Schema, server
settings, the doctor's findings). ``make docs`` builds with warnings as errors and nitpicky
references, so a broken internal link or a missing image fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the package of this tree, whichever copy is installed

from jiyu_magics import __version__  # noqa: E402

project = "jiyu_magics"
author = "JiyuTrainer"
copyright = "JiyuTrainer"
version = release = __version__

extensions = ["myst_parser", "jiyu_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
nitpicky = True

html_theme = "pydata_sphinx_theme"
html_title = f"jiyu_magics {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": []}
html_show_sourcelink = False
