"""jiyu_magics: GPUs, AMP/DDP training and background torchrun jobs from a Jupyter notebook.

``%load_ext jiyu_magics`` registers the magics. Importing the package is cheap on purpose: no
torch, no IPython, no NVML until a magic or command needs them.
"""

from ._version import __version__

__all__ = ["__version__", "runs"]


def runs(*run_ids: str, limit: int = 50):
    """The runs' parameters (``param.NAME`` columns), training options and final/best metrics,
    one row per run: the given ids (or unique prefixes), else the ``limit`` most recent runs.
    A pandas DataFrame when pandas is installed, a list of dicts otherwise, for your own
    analysis (``%runs compare`` draws the same table with the loss curves)."""
    from .core.run_comparison import compare

    records, _ = compare(list(run_ids) or None, limit=limit)
    try:
        import pandas
    except ImportError:
        return records
    return pandas.DataFrame.from_records(records)


def load_ipython_extension(ipython):
    from .magics import register

    register(ipython)


def unload_ipython_extension(ipython):
    from .magics import unregister

    unregister(ipython)


def _jupyter_server_extension_points():
    """Jupyter's entry point for the server extension (enabled by the installed jupyter-config)."""
    from .server.app import JiyuApp

    return [{"module": "jiyu_magics", "app": JiyuApp}]


def _jupyter_labextension_paths():
    """Where ``jupyter labextension develop`` finds the built front-end."""
    return [{"src": "labextension", "dest": "jiyu-magics"}]
