"""The options of ``%submit`` and ``jiyu submit``, defined once so the two never drift apart.
Flag names follow torchrun's (``--nproc-per-node`` is an alias of ``--nproc``)."""

from __future__ import annotations

from typing import Any

from .backends.slurm.options import DEFAULT_CHECKPOINT_GRACE_S, DEFAULT_MAX_REQUEUES
from .export.params import parse_pairs, parse_yaml, read_params_file
from .launch_spec import BACKENDS, K8S_KINDS

PARAM_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("-p", "--param"),
        dict(
            nargs=2,
            action="append",
            dest="params",
            metavar=("NAME", "VALUE"),
            help="override a variable of the cell tagged 'parameters' (repeatable). VALUE is "
            "read as a Python literal (numbers, True/False/None, 'quoted text', lists, "
            "dicts); other text stays a string. papermill's -p reads only numbers and "
            "True/False/None and keeps the rest as text: '\"Hello\"' gives Hello here, "
            '"Hello" with its quotes there; [1, 2] a list here, text there',
        ),
    ),
    (
        ("-y", "--params-yaml"),
        dict(
            action="append",
            dest="params_yaml",
            metavar="YAML",
            help="parameters as a YAML mapping, as papermill's -y: -y '{lr: 0.001, layers: [64, 128]}' (repeatable)",
        ),
    ),
    (
        ("-f", "--params-file"),
        dict(
            action="append",
            dest="params_files",
            metavar="FILE",
            help="parameters from a YAML file, as papermill's -f (repeatable); "
            "-f files apply first, then -y, then -p: the last one given wins",
        ),
    ),
]

SUBMIT_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--nproc", "--nproc-per-node"),
        dict(type=int, default=1, metavar="N", help="processes (ranks) per node; one per GPU (default 1)"),
    ),
    (("--nnodes",), dict(type=int, default=1, metavar="N", help="nodes (default 1); more needs --rdzv-endpoint")),
    (
        ("--gpus",),
        dict(
            type=int,
            default=None,
            metavar="N",
            help="GPUs per node to lease (default: one per process where GPUs are visible, else 0; "
            "0 runs on the CPU); the run waits queued until N GPUs are free, and its ranks see "
            "exactly those (CUDA_VISIBLE_DEVICES)",
        ),
    ),
    (
        ("--priority",),
        dict(
            type=int,
            default=0,
            metavar="P",
            help="higher starts first among queued runs; equal priorities start in submission order (default 0)",
        ),
    ),
    (
        ("--share",),
        dict(
            action="store_true", help="may lease GPUs that other --share runs lease too (never one a run holds alone)"
        ),
    ),
    *PARAM_OPTIONS,
    (("--name",), dict(help="a name for the run (default: the notebook's file name)")),
    (
        ("--max-restarts",),
        dict(
            type=int,
            default=0,
            metavar="K",
            help="let torchrun restart failed workers K times; each training call resumes "
            "from its own last checkpoint, and calls that had finished restore their "
            "final weights",
        ),
    ),
    (
        ("--backend",),
        dict(
            default="local",
            choices=BACKENDS,
            help="local: a detached torchrun here; slurm: a batch job (sbatch); kubernetes: a "
            "Kubeflow TrainJob (kubectl apply). A scheduler's job is submitted when its tool "
            "reaches a cluster, else its spec is printed with the command to submit it; "
            "either way the run is followed in %%jobs / jiyu jobs and stopped with jiyu stop",
        ),
    ),
    (
        ("--stall-timeout",),
        dict(
            type=float,
            default=None,
            metavar="S",
            help="flag the run 'stalled' and dump every rank's stack (jiyu stacks ID) when "
            "no optimizer step was logged for S seconds while its ranks live; the "
            "default of the job's %%%%train/fit calls, which may set their own (default: "
            "the larger of 10x the median step time and 300; 0: off)",
        ),
    ),
    (("--notify",), dict(metavar="CMD", help="run CMD RUN_ID STATUS when the job ends")),
    (("--rdzv-endpoint",), dict(metavar="HOST:PORT", help="multi-node rendezvous address (torchrun's)")),
    (("--node-rank",), dict(type=int, metavar="R", help="this node's rank (static rendezvous)")),
]

# --backend slurm only: each becomes a #SBATCH line of the batch script, checked before sbatch runs.
SLURM_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--time",),
        dict(
            metavar="LIMIT",
            help="Slurm: the job's time limit (minutes, HH:MM:SS or D-HH:MM); "
            "before it, the ranks checkpoint and the job is requeued",
        ),
    ),
    (("--partition",), dict(metavar="NAME", help="Slurm: the partition to run in")),
    (("--account",), dict(metavar="NAME", help="Slurm: the account to charge")),
    (("--qos",), dict(metavar="NAME", help="Slurm: the quality of service")),
    (("--constraint",), dict(metavar="FEATURES", help="Slurm: node features the job needs (a100, a&b, [a|b])")),
    (("--mem",), dict(metavar="SIZE", help="Slurm: memory per node (64G, 500M)")),
    (
        ("--gpus-per-node",),
        dict(
            type=int,
            metavar="N",
            help="Slurm: GPUs per node, asked as --gres=gpu:N (default: one per process; 0: a CPU job on gloo)",
        ),
    ),
    (
        ("--sbatch-arg",),
        dict(
            action="append",
            dest="sbatch_args",
            metavar="OPTION",
            help="Slurm: any other sbatch option, passed through as written (--sbatch-arg=--exclusive; repeatable)",
        ),
    ),
    (
        ("--max-requeues",),
        dict(
            type=int,
            metavar="K",
            help=f"Slurm: times the job is requeued when its time "
            f"limit comes, resuming from its checkpoint (default "
            f"{DEFAULT_MAX_REQUEUES}; 0: never)",
        ),
    ),
    (
        ("--checkpoint-grace",),
        dict(
            type=int,
            metavar="S",
            help=f"Slurm: seconds before the time limit at which "
            f"the ranks are told to checkpoint (SIGUSR1; default "
            f"{DEFAULT_CHECKPOINT_GRACE_S})",
        ),
    ),
]
K8S_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--k8s-kind",),
        dict(
            choices=K8S_KINDS,
            help="Kubernetes: trainjob (Kubeflow Trainer v2, the default) or pytorchjob (the older training operator)",
        ),
    ),
]
SUBMIT_OPTIONS += SLURM_OPTIONS + K8S_OPTIONS
SLURM_FIELDS = (
    "time",
    "partition",
    "account",
    "qos",
    "constraint",
    "mem",
    "gpus_per_node",
    "sbatch_args",
    "max_requeues",
    "checkpoint_grace",
)


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
    slurm = {name: getattr(args, name) for name in SLURM_FIELDS if getattr(args, name) is not None}
    return dict(
        nproc=args.nproc,
        nnodes=args.nnodes,
        params=params_of(args),
        name=args.name,
        max_restarts=args.max_restarts,
        backend=args.backend,
        notify=args.notify,
        rdzv_endpoint=args.rdzv_endpoint,
        node_rank=args.node_rank,
        slurm=slurm or None,
        k8s_kind=args.k8s_kind,
        gpus=args.gpus,
        priority=args.priority,
        share=args.share,
        stall_timeout=args.stall_timeout,
    )
