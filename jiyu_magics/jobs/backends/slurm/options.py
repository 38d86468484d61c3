"""What a Slurm job asks the scheduler for, checked before ``sbatch`` runs.

Each value becomes one ``#SBATCH`` line of the batch script, so each must be one word of the
characters Slurm accepts there: a newline or a space would forge a line or split an option.
What Slurm alone can judge (an unknown partition, a limit of the site) is left to ``sbatch``,
whose refusal the user reads in Slurm's own words.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from ...job_error import JobError

DEFAULT_MAX_REQUEUES = 3
DEFAULT_CHECKPOINT_GRACE_S = 120
# Seconds every node has to reach the rendezvous: Slurm starts a job's nodes together, so this
# bounds how long they may wait for each other (torch's default is 600)
DEFAULT_JOIN_TIMEOUT_S = 180
MAX_SIGNAL_LEAD_S = 65535  # the largest @time sbatch --signal takes
# --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
_TIME = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$"
)
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")  # partition, account, qos
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|\[\]()*,:!-]+$")  # feature expressions: a&b, [a|b], a*2
_MEMORY = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
# set by jiyu itself: the log must stay in the run folder, the requeue and signal are jiyu's
_OWN_FLAGS = (
    "--output",
    "-o",
    "--error",
    "-e",
    "--open-mode",
    "--signal",
    "--requeue",
    "--no-requeue",
    "--chdir",
    "-D",
    "--job-name",
    "-J",
    "--nodes",
    "-N",
    "--ntasks-per-node",
    "--parsable",
    "--wrap",
)


@dataclass
class SlurmOptions:
    time: str | None = None  # the job's time limit, in Slurm's --time formats
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    mem: str | None = None  # memory per node: 64G, 500M
    gpus_per_node: int | None = None  # None: one per process (--nproc); 0: a CPU job (gloo)
    sbatch_args: list[str] = field(default_factory=list)
    max_requeues: int = DEFAULT_MAX_REQUEUES
    checkpoint_grace: int = DEFAULT_CHECKPOINT_GRACE_S
    join_timeout: int = DEFAULT_JOIN_TIMEOUT_S

    @classmethod
    def from_dict(cls, data: dict | None) -> SlurmOptions:
        unknown = set(data or {}) - {f.name for f in fields(cls)}
        if unknown:
            raise JobError(f"unknown Slurm option(s): {', '.join(sorted(unknown))}")
        return cls(**(data or {}))

    def to_dict(self) -> dict:
        return asdict(self)

    def validated(self) -> SlurmOptions:
        limit = time_limit_seconds(self.time) if self.time is not None else None
        for flag, value, pattern in (
            ("--partition", self.partition, _NAME),
            ("--account", self.account, _NAME),
            ("--qos", self.qos, _NAME),
            ("--constraint", self.constraint, _CONSTRAINT),
            ("--mem", self.mem, _MEMORY),
        ):
            if value is not None and not pattern.match(str(value)):
                raise JobError(f"{flag} {value!r}: not a value Slurm accepts there")
        _count("--gpus-per-node", self.gpus_per_node, 0, allow_none=True)
        _count("--max-requeues", self.max_requeues, 0)
        _count("--checkpoint-grace", self.checkpoint_grace, 1)
        _count("--join-timeout", self.join_timeout, 1)
        if self.checkpoint_grace > MAX_SIGNAL_LEAD_S:
            raise JobError(f"--checkpoint-grace {self.checkpoint_grace}: at most {MAX_SIGNAL_LEAD_S} seconds")
        if limit is not None and self.checkpoint_grace >= limit:
            raise JobError(
                f"--checkpoint-grace {self.checkpoint_grace} s is not shorter than --time {self.time} "
                f"({limit} s): the job would be told to checkpoint before it starts"
            )
        for arg in self.sbatch_args:
            _check_pass_through(arg)
        return self

    def gpus(self, nproc: int) -> int:
        return nproc if self.gpus_per_node is None else self.gpus_per_node


def time_limit_seconds(text: str) -> int:
    """Seconds in a Slurm ``--time`` value; a ``JobError`` for anything Slurm would not read."""
    found = _TIME.match(str(text).strip())
    if not found:
        raise JobError(f"--time {text!r}: expected minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]] (Slurm's formats)")
    g = {k: int(v) if v else 0 for k, v in found.groupdict().items()}
    if found["days"] is not None:
        seconds = ((g["days"] * 24 + g["dh"]) * 60 + g["dm"]) * 60 + g["ds"]
    elif found["c"] is not None:
        seconds = (g["a"] * 60 + g["b"]) * 60 + g["c"]
    else:
        seconds = g["a"] * 60 + g["b"]
    if seconds <= 0:
        raise JobError(f"--time {text!r}: a time limit must be longer than 0")
    return seconds


def _check_pass_through(arg: str) -> None:
    if not isinstance(arg, str) or not arg.startswith("-") or not arg.isprintable() or any(c.isspace() for c in arg):
        raise JobError(
            f"--sbatch-arg {arg!r}: expected one sbatch option without spaces, as in "
            "--sbatch-arg=--exclusive or --sbatch-arg=--nice=10"
        )
    flag = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]  # -ofile is -o file
    if flag in _OWN_FLAGS:
        raise JobError(
            f"--sbatch-arg {arg}: jiyu sets {flag} itself (the log stays in the run folder, "
            "the time-limit signal and requeue are jiyu's)"
        )


def _count(flag: str, value, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobError(f"{flag} {value!r}: expected a whole number >= {minimum}")
