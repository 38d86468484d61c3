"""The options of ``%submit`` and ``jiyu submit``, defined once so the two never drift apart.
Flag names follow torchrun's (``--nproc-per-node`` is an alias of ``--nproc``)."""

from __future__ import annotations

from typing import Any

from .export.params import parse_pairs
from .launch_spec import BACKENDS

PARAM_OPTION: tuple[tuple[str, ...], dict[str, Any]] = (
    ("-p", "--param"), dict(nargs=2, action="append", dest="params", metavar=("NAME", "VALUE"),
                            help="override a variable of the cell tagged 'parameters'; VALUE is a Python "
                                 "literal, other text stays a string (repeatable)"))

SUBMIT_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--nproc", "--nproc-per-node"), dict(type=int, default=1, metavar="N",
                                            help="processes (ranks) per node; one per GPU (default 1)")),
    (("--nnodes",), dict(type=int, default=1, metavar="N", help="nodes (default 1); more needs --rdzv-endpoint")),
    PARAM_OPTION,
    (("--name",), dict(help="a name for the run (default: the notebook's file name)")),
    (("--max-restarts",), dict(type=int, default=0, metavar="K",
                               help="let torchrun restart failed workers K times; each training call resumes "
                                    "from its own last checkpoint, and calls that had finished restore their "
                                    "final weights")),
    (("--backend",), dict(default="local", choices=BACKENDS,
                          help="local: a detached torchrun here; slurm: an sbatch script; kubernetes: a "
                               "Kubeflow PyTorchJob (submitted when sbatch/kubectl exist, else printed)")),
    (("--notify",), dict(metavar="CMD", help="run CMD RUN_ID STATUS when the job ends")),
    (("--rdzv-endpoint",), dict(metavar="HOST:PORT", help="multi-node rendezvous address (torchrun's)")),
    (("--node-rank",), dict(type=int, metavar="R", help="this node's rank (static rendezvous)")),
]


def submit_kwargs(args) -> dict[str, Any]:
    """``jobs.submit`` keyword arguments from parsed options (without the notebook)."""
    return dict(nproc=args.nproc, nnodes=args.nnodes, params=parse_pairs(args.params), name=args.name,
                max_restarts=args.max_restarts, backend=args.backend, notify=args.notify,
                rdzv_endpoint=args.rdzv_endpoint, node_rank=args.node_rank)
