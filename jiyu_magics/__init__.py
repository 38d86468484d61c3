"""jiyu_magics: GPUs, AMP/DDP training and background torchrun jobs from a Jupyter notebook.

``%load_ext jiyu_magics`` registers the magics. Importing the package is cheap on purpose: no
torch, no IPython, no NVML until a magic or command needs them.
"""

__version__ = "0.1.0"


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
