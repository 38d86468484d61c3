"""Options that doors on both sides of the layers take, declared once: ``fit``/``%%train``
(``train.fit_options``), a submission (``%submit``, ``jiyu submit``, the REST API:
``jobs.submit_options``) and ``%ranks start``. Each door adds only what is its own: what the
default means there (``default_text``), whether a request may set it. The options only jobs-side
doors share (``--gpus``, ``--backend``, the Slurm ones) are ``SubmitOptions`` fields, which
``%ranks start`` reads from there. ``--nproc`` is ranks per node in a submission and in
``%%train``, where an absent flag trains in the kernel itself. ``--track`` is two options of one
name: ``fit``'s is one call's trackers (a comma list), a submission's the run owner's list of them.
"""

from __future__ import annotations

from .option_spec import OptionSpec

NAME = OptionSpec(name="name", type=str, default=None, help="The run's name in %jobs and the lab panel.")
DEVICE = OptionSpec(
    name="device",
    type=str,
    default=None,
    help="cuda, cuda:1, cpu ...; cpu: ranks on gloo that lease no GPU.",
)
STALL_TIMEOUT = OptionSpec(
    name="stall_timeout",
    type=float,
    default=None,
    help="In a run of several ranks (--nproc, a job): flag it 'stalled' and dump every rank's Python stack "
    "(jiyu stacks ID) when no optimizer step was logged for this many seconds; 0 turns it off.",
    metavar="SECONDS",
)
MAX_PROCESSES = 1024  # per node: far past any machine, small enough that nothing overflows
NPROC = OptionSpec(
    name="nproc",
    type=int,
    default=1,
    help="Processes (ranks) per node; one per GPU.",
    flags=("--nproc", "--nproc-per-node"),
    metavar="N",
    bounds=(1, MAX_PROCESSES),
)
