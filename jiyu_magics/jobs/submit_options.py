"""Every option of a submission (``%submit``, ``jiyu submit``, ``POST /jiyu/api/runs``),
declared once with its help and its checks, as ``OptionSpec``s (``core.options``) like ``fit``'s.

``SubmitOptions`` is the one value the three doors parse into: the magic and the CLI build their
argparse options from its fields (``argument_specs``: flag names follow torchrun's,
``--nproc-per-node`` is an alias of ``--nproc``) and read them back with ``from_args``; the
server takes a JSON body's fields by these names (``request_fields``) and reads them with
``from_request``; ``%ranks start`` builds its flags from the options a pool shares with a job
(``option_spec``), and ``--name`` and ``--stall-timeout`` are ``fit``'s too (``core.options.run_options``).
``validated`` checks them all in one place and says what is wrong in one line, naming the
option as the user wrote it: ``--nproc`` on the command line, ``'nproc'`` in a request. The run
name rule (``core.runs.names``) and the stall timeout rule (``core.events.stall_clock``) are the
core's, used here as by ``fit``.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import shutil
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.events.stall_clock import BadStallTimeout, check_stall_timeout
from ..core.options.option_spec import BadOptionValue, OptionSpec, option, specs_of
from ..core.options.run_options import NAME, NPROC, STALL_TIMEOUT
from ..core.runs.names import BadRunName, check_run_name
from ..trackers.destinations import TrackSpecError, as_strings, parse_track
from ..trackers.extras import check_installed
from .backends.slurm.options import (
    DEFAULT_CHECKPOINT_GRACE_S,
    DEFAULT_JOIN_TIMEOUT_S,
    DEFAULT_MAX_REQUEUES,
    SlurmOptions,
)
from .export.params import parse_pairs, parse_yaml, read_params_file
from .job_error import JobError
from .launch_spec import BACKENDS, K8S_KINDS, LaunchSpec

MAX_NODES = 4096
MAX_GPUS = 1024
MAX_PRIORITY = 10**6
MAX_RESTARTS = 1000
SLURM, KUBERNETES = "slurm", "kubernetes"


@dataclass
class SubmitOptions:
    nproc: int = NPROC.field(request=True)
    nnodes: int = option(
        1,
        "Nodes; more than one needs --rdzv-endpoint, or a scheduler (--backend slurm, kubernetes).",
        metavar="N",
        bounds=(1, MAX_NODES),
        request=True,
    )
    gpus: int | None = option(
        None,
        "GPUs per node to lease (0 runs on the CPU); the run waits queued until N GPUs are free, "
        "and its ranks see exactly those (CUDA_VISIBLE_DEVICES).",
        default_text="one per process where GPUs are visible, else 0",
        metavar="N",
        bounds=(0, MAX_GPUS),
        request=True,
    )
    priority: int = option(
        0,
        "Higher starts first among queued runs; equal priorities start in submission order.",
        metavar="P",
        bounds=(-MAX_PRIORITY, MAX_PRIORITY),
        request=True,
    )
    share: bool = option(
        False, "May lease GPUs that other --share runs lease too (never one a run holds alone).", request=True
    )
    preemptible: bool = option(
        False,
        "On a shared box: when another user's run has waited past the box policy's preempt_after_minutes, "
        "this job stops with a checkpoint, waits in the queue again and resumes from that checkpoint.",
        request=True,
    )
    name: str | None = NAME.field(default_text="the notebook's file name", request=True)
    max_restarts: int = option(
        0,
        "Let torchrun restart failed workers K times; each training call resumes from its own last "
        "checkpoint, and calls that had finished restore their final weights.",
        metavar="K",
        bounds=(0, MAX_RESTARTS),
    )
    backend: str = option(
        "local",
        "local: a detached torchrun here; slurm: a batch job (sbatch); kubernetes: a Kubeflow TrainJob "
        "(kubectl apply). A scheduler's job is submitted when its tool reaches a cluster, else its spec is "
        "printed with the command to submit it; either way the run is followed in %jobs / jiyu jobs and "
        "stopped with jiyu stop.",
        choices=BACKENDS,
        request=True,
    )
    stall_timeout: float | None = STALL_TIMEOUT.field(
        default_text="the larger of 10x the median step time and 300, for the job's %%train/fit calls that set none",
        request=True,
    )
    notify: str | None = option(None, "Run CMD RUN_ID STATUS when the job ends.", metavar="CMD")
    track: list[str] = option(
        [],
        "Follow the run live in TensorBoard or MLflow: tensorboard[:DIR] or mlflow[:URI], a comma list or "
        "repeated for both (its owner follows them, with those its %%train --track cells name; a cell "
        "that names none follows $JIYU_TRACK).",
        metavar="TRACKER[:WHERE]",
        request=True,
    )
    rdzv_endpoint: str | None = option(None, "Multi-node rendezvous address (torchrun's).", metavar="HOST:PORT")
    node_rank: int | None = option(None, "This node's rank (static rendezvous).", metavar="R", bounds=(0, MAX_NODES))
    # -- each becomes a #SBATCH line of the batch script (backends/slurm/options checks them)
    time: str | None = option(
        None,
        "Slurm: the job's time limit (minutes, HH:MM:SS or D-HH:MM); before it, the ranks checkpoint and "
        "the job is requeued.",
        metavar="LIMIT",
        backend=SLURM,
    )
    partition: str | None = option(None, "Slurm: the partition to run in.", metavar="NAME", backend=SLURM)
    account: str | None = option(None, "Slurm: the account to charge.", metavar="NAME", backend=SLURM)
    qos: str | None = option(None, "Slurm: the quality of service.", metavar="NAME", backend=SLURM)
    constraint: str | None = option(
        None, "Slurm: node features the job needs (a100, a&b, [a|b]).", metavar="FEATURES", backend=SLURM
    )
    mem: str | None = option(None, "Slurm: memory per node (64G, 500M).", metavar="SIZE", backend=SLURM)
    gpus_per_node: int | None = option(
        None,
        "Slurm: GPUs per node, asked as --gres=gpu:N (0: a CPU job on gloo).",
        default_text="one per process",
        metavar="N",
        bounds=(0, MAX_GPUS),
        backend=SLURM,
    )
    sbatch_args: list[str] = option(
        [],
        "Slurm: any other sbatch option, passed through as written (--sbatch-arg=--exclusive; repeatable).",
        flags=("--sbatch-arg",),
        metavar="OPTION",
        backend=SLURM,
    )
    max_requeues: int | None = option(
        None,
        "Slurm: times the job is requeued when its time limit comes, resuming from its checkpoint (0: never).",
        default_text=str(DEFAULT_MAX_REQUEUES),
        metavar="K",
        backend=SLURM,
    )
    checkpoint_grace: int | None = option(
        None,
        "Slurm: seconds before the time limit at which the ranks are told to checkpoint (SIGUSR1).",
        default_text=str(DEFAULT_CHECKPOINT_GRACE_S),
        metavar="S",
        backend=SLURM,
    )
    join_timeout: int | None = option(
        None,
        "Slurm: seconds every node has to reach the first node's rendezvous before the job fails naming "
        "the nodes that never came.",
        default_text=str(DEFAULT_JOIN_TIMEOUT_S),
        metavar="S",
        backend=SLURM,
    )
    k8s_kind: str | None = option(
        None,
        "Kubernetes: trainjob (Kubeflow Trainer v2) or pytorchjob (the older training operator).",
        default_text="trainjob",
        choices=K8S_KINDS,
        backend=KUBERNETES,
    )
    # the notebook's parameters: -p/-y/-f on the command line (``params_of``), values in a request
    params: dict[str, Any] = field(default_factory=dict)

    # -- the three doors --------------------------------------------------------------------------
    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SubmitOptions:
        """From the options ``argument_specs`` declared (the magic's and the CLI's), checked."""
        values = {spec.name: getattr(args, spec.name) for spec in option_specs()}
        values["sbatch_args"] = values["sbatch_args"] or []
        return cls(**values, params=params_of(args)).validated()

    @classmethod
    def from_fields(cls, **values: Any) -> SubmitOptions:
        """From keyword arguments (``jobs.submit(notebook, nproc=2, ...)``), checked; the Slurm
        options may come as one ``slurm={...}`` mapping."""
        slurm = values.pop("slurm", None) or {}
        unknown = sorted(set(values) - set(_FIELDS)) + sorted(set(slurm) - set(_slurm_fields()))
        if unknown:
            raise JobError(f"unknown submit option(s): {', '.join(unknown)}")
        if values.get("params") is None:
            values.pop("params", None)
        return cls(**values, **slurm).validated()

    @classmethod
    def from_request(cls, body: dict[str, Any], params: dict[str, Any]) -> SubmitOptions:
        """From a request's JSON body (the fields a request may set; ``params`` already read),
        checked with the request's names (``'nproc'``). The Slurm options come as one ``slurm``
        object of ``SlurmOptions`` fields (``{"time": "1:00:00", "gpus_per_node": 0}``)."""
        requested = [spec.name for spec in option_specs() if spec.request]
        values = {name: body[name] for name in requested if body.get(name) is not None}
        slurm = body.get("slurm") or {}
        if not isinstance(slurm, dict):
            raise JobError('\'slurm\' must be an object of Slurm options, e.g. {"time": "1:00:00"}')
        unknown = sorted(set(slurm) - set(_slurm_fields()))
        if unknown:
            raise JobError(f"'slurm': unknown Slurm option(s) {', '.join(map(repr, unknown))}")
        return cls(**values, **slurm, params=params).validated(request=True)

    # -- the one check ----------------------------------------------------------------------------
    def validated(self, request: bool = False) -> SubmitOptions:
        """Every option checked (``request``: errors name the JSON field, not the flag)."""
        label = (lambda name: f"'{name}'") if request else _flag
        for spec in option_specs():
            try:
                spec.check(getattr(self, spec.name), label(spec.name))
            except BadOptionValue as error:
                raise JobError(str(error)) from None
        try:
            self.name = check_run_name(self.name)
        except BadRunName as error:
            raise JobError(f"{label('name')}: {error}") from None
        try:
            self.stall_timeout = check_stall_timeout(self.stall_timeout)
        except BadStallTimeout as error:
            raise JobError(f"{label('stall_timeout')} {self.stall_timeout!r:.40}: expected {error}") from None
        self.track = _tracks(label("track"), self.track)
        self._check_rendezvous()
        self._check_backend_options()
        if self.notify is not None:
            _check_command(self.notify)
        return self

    def _check_rendezvous(self) -> None:
        if self.rdzv_endpoint is not None:
            host, _, port = str(self.rdzv_endpoint).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise JobError(f"--rdzv-endpoint {self.rdzv_endpoint!r}: expected HOST:PORT")
        if self.node_rank is not None and self.node_rank >= self.nnodes:
            raise JobError(f"--node-rank {self.node_rank} must be below --nnodes {self.nnodes}")
        if self.backend == "local" and self.nnodes > 1 and not self.rdzv_endpoint:
            raise JobError(f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (the first node's address)")

    def _check_backend_options(self) -> None:
        for backend in (SLURM, KUBERNETES):
            given = [_flag(s.name) for s in option_specs() if s.backend == backend and self._given(s)]
            if given and self.backend != backend:
                raise JobError(f"{', '.join(given)}: {backend.capitalize()} options, for --backend {backend} only")
        if self.backend == SLURM:
            SlurmOptions.from_dict(self.slurm()).validated()

    def _given(self, spec: OptionSpec) -> bool:
        value = getattr(self, spec.name)
        return value not in (None, [], spec.default)

    # -- what the rest of the jobs layer takes ----------------------------------------------------
    def slurm(self) -> dict[str, Any]:
        """The Slurm options given (``SlurmOptions`` fields), or {}."""
        return {name: getattr(self, name) for name in _slurm_fields() if getattr(self, name) not in (None, [])}

    def launch_spec(self) -> LaunchSpec:
        """How the run is to be launched, as its supervisor and scheduler placements read it."""
        slurm = SlurmOptions.from_dict(self.slurm()).validated().to_dict() if self.backend == SLURM else None
        return LaunchSpec(
            nproc=self.nproc,
            nnodes=self.nnodes,
            max_restarts=self.max_restarts,
            backend=self.backend,
            rdzv_endpoint=self.rdzv_endpoint,
            node_rank=self.node_rank,
            notify=self.notify,
            slurm=slurm,
            k8s_kind=self.k8s_kind,
            gpus=self.gpus,
            priority=self.priority,
            share=self.share,
            preemptible=self.preemptible,
            stall_timeout=self.stall_timeout,
            track=self.track or None,
        )


def _tracks(label: str, value: Any) -> list[str]:
    """``--track`` values as canonical destinations (absolute: the supervisor and a Slurm
    allocation read them elsewhere), with the pip command when a tracker is not installed."""
    try:
        destinations = parse_track([value] if isinstance(value, str) else list(value or []))
        check_installed(destinations)
    except (TrackSpecError, TypeError) as error:
        written = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value  # as given
        raise JobError(f"{label} {written!r:.60}: {error}") from None
    return as_strings(destinations)


def option_specs() -> list[OptionSpec]:
    """The options in declaration order (``params`` is the -p/-y/-f options' business): each
    an ``OptionSpec`` (name, value type, default, help, flags, bounds, choices, whether a
    request may set it), from which the magic's and the CLI's parsers, the REST request's
    fields and the checks are made."""
    return specs_of(SubmitOptions)


def option_spec(name: str) -> OptionSpec:
    """One option's declaration, for a door that takes it too (``%ranks start``)."""
    return next(spec for spec in option_specs() if spec.name == name)


def request_fields() -> list[str]:
    """The fields of a submission request (``POST /jiyu/api/runs``) that are options: the
    declared ``request`` ones by name, then ``slurm``, an object of Slurm options."""
    return [spec.name for spec in option_specs() if spec.request] + ["slurm"]


def argument_specs() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """(flags, argparse keyword arguments) of every option, -p/-y/-f after --share, as the
    magic's ``@argument``s and the CLI's parser declare them."""
    specs = [(spec.flags, spec.argparse_kwargs()) for spec in option_specs()]
    after = next(i for i, (flags, _) in enumerate(specs) if flags == ("--share",)) + 1
    return [*specs[:after], *PARAM_OPTIONS, *specs[after:]]


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


def params_of(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters of ``-f``, ``-y`` and ``-p`` options, in papermill's order: files, then
    YAML texts, then pairs; a name given again takes the later value."""
    params: dict[str, Any] = {}
    for path in args.params_files or ():
        params.update(read_params_file(path))
    for text in args.params_yaml or ():
        params.update(parse_yaml(text))
    params.update(parse_pairs(args.params))
    return params


def _slurm_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(SlurmOptions)]


def _flag(name: str) -> str:
    return option_spec(name).flag


def _check_command(command: str) -> None:
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise JobError(f"--notify {command!r}: {error}") from None
    if not words or shutil.which(words[0]) is None:
        raise JobError(f"--notify {command!r}: {words[0] if words else 'the command'} is not an executable on PATH")


_FIELDS = [f.name for f in fields(SubmitOptions)]
