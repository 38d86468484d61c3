"""The IPython adapter: thin ``@magics_class`` wrappers that parse, delegate and render.

Each module holds the magics of one concern; ``register`` loads them all for ``%load_ext``.
"""

from __future__ import annotations

from IPython.core.magic import Magics

from . import gpu_magics, job_magics, ranks_magic, runs_magic, train_magic

MODULES = (gpu_magics, train_magic, job_magics, runs_magic, ranks_magic)


def magic_classes() -> list[type[Magics]]:
    return [cls for module in MODULES for cls in module.MAGICS]


def register(ipython) -> None:
    for cls in magic_classes():
        ipython.register_magics(cls)
    from .idle_notice import start  # on a shared box: a GPU held while idle is said in the notebook

    start(ipython)


def unregister(ipython) -> None:
    """IPython has no ``unregister_magics``: drop our names from the manager's tables."""
    tables = ipython.magics_manager.magics
    for cls in magic_classes():
        for kind, names in cls.magics.items():
            for name in names:
                tables[kind].pop(name, None)
    ipython.magics_manager.registry = {
        k: v for k, v in ipython.magics_manager.registry.items() if type(v) not in magic_classes()
    }
