"""The options of ``%submit`` and ``jiyu submit``, defined once so the two never drift apart.
Flag names follow torchrun's (``--nproc-per-node`` is an alias of ``--nproc``)."""

from __future__ import annotations

from typing import Any

from .export.params import parse_pairs, parse_yaml, read_params_file
from .launch_spec import BACKENDS

PARAM_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("-p", "--param"), dict(nargs=2, action="append", dest="params", metavar=("NAME", "VALUE"),
                             help="override a variable of the cell tagged 'parameters' (repeatable). VALUE is "
                                  "read as a Python literal (numbers, True/False/None, 'quoted text', lists, "
                                  "dicts); other text stays a string. papermill's -p reads only numbers and "
                                  "True/False/None and keeps the rest as text: '\"Hello\"' gives Hello here, "
                                  "\"Hello\" with its quotes there; [1, 2] a list here, text there")),
    (("-y", "--params-yaml"), dict(action="append", dest="params_yaml", metavar="YAML",
                                   help="parameters as a YAML mapping, as papermill's -y: "
                                        "-y '{lr: 0.001, layers: [64, 128]}' (repeatable)")),
    (("-f", "--params-file"), dict(action="append", dest="params_files", metavar="FILE",
                                   help="parameters from a YAML file, as papermill's -f (repeatable); "
                                        "-f files apply first, then -y, then -p: the last one given wins")),
]

SUBMIT_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--nproc", "--nproc-per-node"), dict(type=int, default=1, metavar="N",
                                            help="processes (ranks) per node; one per GPU (default 1)")),
    (("--nnodes",), dict(type=int, default=1, metavar="N", help="nodes (default 1); more needs --rdzv-endpoint")),
    *PARAM_OPTIONS,
    (("--name",), dict(help="a name for the run (default: the notebook's file name)")),
    (("--max-restarts",), dict(type=int, default=0, metavar="K",
                               help="let torchrun restart failed workers K times; training resumes from its "
                                    "last checkpoint")),
    (("--backend",), dict(default="local", choices=BACKENDS,
                          help="local: a detached torchrun here; slurm: an sbatch script; kubernetes: a "
                               "Kubeflow PyTorchJob (submitted when sbatch/kubectl exist, else printed)")),
    (("--notify",), dict(metavar="CMD", help="run CMD RUN_ID STATUS when the job ends")),
    (("--rdzv-endpoint",), dict(metavar="HOST:PORT", help="multi-node rendezvous address (torchrun's)")),
    (("--node-rank",), dict(type=int, metavar="R", help="this node's rank (static rendezvous)")),
]


def params_of(args) -> dict[str, Any]:
    """The parameters of ``-f``, ``-y`` and ``-p`` options, in papermill's order: files, then
    YAML texts, then pairs; a name given again takes the later value."""
    params: dict[str, Any] = {}
    for path in args.params_files or ():
        params.update(read_params_file(path))
    for text in args.params_yaml or ():
        params.update(parse_yaml(text))
    params.update(parse_pairs(args.params))
    return params


def submit_kwargs(args) -> dict[str, Any]:
    """``jobs.submit`` keyword arguments from parsed options (without the notebook)."""
    return dict(nproc=args.nproc, nnodes=args.nnodes, params=params_of(args), name=args.name,
                max_restarts=args.max_restarts, backend=args.backend, notify=args.notify,
                rdzv_endpoint=args.rdzv_endpoint, node_rank=args.node_rank)
