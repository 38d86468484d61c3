"""Start-up stays cheap because heavy modules load when first used, not at start: what a fresh
process has imported after `jiyu export`, `jiyu --help` and `%load_ext jiyu_magics`. (How long
each takes is measured in benchmarks/startup.py, not here.)"""

from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT

REPORT = "import sys; print('loaded: ' + ' '.join(sorted(m for m in {watched!r} if m in sys.modules)))"


def loaded_after(code: str, watched: tuple[str, ...]) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\n" + REPORT.format(watched=watched)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.splitlines()[-1].removeprefix("loaded:").split())


def test_export_reads_the_notebook_without_nbformat_or_jsonschema(tmp_path):
    """nbformat's reader imports jsonschema's format checkers: about a second of `jiyu export`."""
    notebook = ROOT / "notebooks" / "01_quickstart.ipynb"
    code = (
        f"from jiyu_magics.cli import main\n"
        f"assert main(['export', {str(notebook)!r}, '-o', {str(tmp_path / 'job.py')!r}]) == 0"
    )
    assert loaded_after(code, ("nbformat", "jsonschema")) == set()
    assert "Exported by jiyu" in (tmp_path / "job.py").read_text() and "plt.show()" in (tmp_path / "job.py").read_text()


def test_cli_help_imports_no_launcher_scheduler_or_gpu_code():
    code = "from jiyu_magics.cli import build_parser\nbuild_parser().format_help()"
    watched = (
        "jiyu_magics.jobs.lifecycle",
        "jiyu_magics.core.gpu.doctor",
        "jiyu_magics.core.gpu.snapshot",
        "jiyu_magics.jobs.export.notebook_export",
        "importlib.metadata",
    )
    assert loaded_after(code, watched) == set()


def test_listing_local_runs_leaves_the_lifecycle_for_a_scheduled_run(tmp_path, monkeypatch):
    """`jiyu jobs` follows scheduled runs; with none, the lifecycle chain (~45 ms) stays unloaded."""
    monkeypatch.setenv("JIYU_HOME", str(tmp_path))
    code = "from jiyu_magics.cli import main\nassert main(['jobs', '--all']) == 0"
    watched = ("jiyu_magics.jobs.lifecycle", "jiyu_magics.jobs.rank_placement", "jiyu_magics.jobs.stall_watch")
    assert loaded_after(code, watched) == set()


def test_load_ext_leaves_gpu_checks_listings_and_the_launcher_for_later():
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "InteractiveShell.instance().run_line_magic('load_ext', 'jiyu_magics')"
    )
    watched = (
        "jiyu_magics.core.gpu.doctor",
        "jiyu_magics.core.gpu.status",
        "jiyu_magics.jobs.lifecycle",
        "jiyu_magics.views.run_table",
        "jiyu_magics.jobs.export.notebook_export",
        "torch",
        "tensorboard",
        "mlflow",
        "jiyu_magics.trackers.follower",
    )
    assert loaded_after(code, watched) == set()


def test_an_older_notebook_format_is_still_exported(tmp_path):
    """Only nbformat 3 and older go through nbformat (its converter)."""
    import json

    old = tmp_path / "old.ipynb"  # as nbformat 3 wrote it: cells under worksheets, code in "input"
    old.write_text(
        json.dumps(
            {
                "nbformat": 3,
                "nbformat_minor": 0,
                "metadata": {"name": "old"},
                "worksheets": [
                    {
                        "cells": [
                            {
                                "cell_type": "code",
                                "input": "x = 41 + 1\nprint(x)",
                                "language": "python",
                                "outputs": [],
                                "collapsed": False,
                                "metadata": {},
                            }
                        ],
                        "metadata": {},
                    }
                ],
            }
        )
    )
    from jiyu_magics.jobs import export_notebook

    assert "x = 41 + 1" in export_notebook(old).script
