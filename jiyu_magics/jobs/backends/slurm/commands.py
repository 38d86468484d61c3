"""Slurm's client commands as jiyu uses them: ``sbatch`` to submit, ``scontrol show job`` to
follow (Slurm keeps a job there ``MinJobAge`` seconds after its end), ``sacct`` where the site
keeps accounting, the job-completion log where it keeps one (``JobCompType=jobcomp/filetxt``),
``squeue`` to check a job left the queue and ``scancel`` to stop it.

Every command reads ``SLURM_CONF`` from the environment, as Slurm's own tools do.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ....core.environment import child_environment
from ....core.settings import Settings
from ...job_error import JobError
from ...rank_placement import SchedulerUnreachable

TIMEOUT_S = 30.0
ACTIVE_QUEUE_STATES = (
    "PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,REQUEUED,REQUEUE_HOLD,REQUEUE_FED,SIGNALING,"
    "STAGE_OUT,RESIZING,STOPPED"
)
_FIELD = re.compile(r" (?=[A-Za-z][\w:/]*=)")  # scontrol -o: "Key=value Key=value ..."


class SlurmUnavailable(SchedulerUnreachable):
    """Slurm's client is not installed here, not configured, or its controller does not
    answer: a job cannot be submitted or asked about from this machine now."""


@dataclass
class SlurmJobInfo:
    job_id: str
    state: str  # JobState: PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT...
    reason: str | None = None  # why it pends (Resources, Priority, BeginTime...), or None
    exit_code: int | None = None  # the batch script's exit code, 128 + N when signal N ended it
    restarts: int = 0  # how many times it was requeued
    started: float | None = None  # when its current attempt started (epoch seconds), if it ran
    source: str = "scontrol"  # who said so: scontrol, sacct or jobcomp
    nodes: str | None = None  # its nodes as Slurm lists them (n[1-2]), once it ran


def sbatch(script: Path, env: Mapping[str, str] | None = None) -> str:
    """Submits the batch script (the job gets this environment plus ``env``, as sbatch
    exports it); returns the job id. ``SlurmUnavailable`` when Slurm cannot be reached from
    here at all; ``JobError`` with Slurm's own words when it refuses the job."""
    _check_configured("sbatch")
    done = _run("sbatch", "--parsable", str(script), env=env)
    if done.returncode:
        if _not_configured(done.stderr):
            raise SlurmUnavailable(f"Slurm is not configured on this machine ({_errors(done, last=True)})")
        raise JobError(f"sbatch refused the job: {_errors(done)} (the batch script is {script})")
    return done.stdout.strip().split(";")[0]


def job_info(job_id: str) -> SlurmJobInfo | None:
    """What Slurm knows of the job, from whichever source still has it; None when none does."""
    return show(job_id) or accounting(job_id) or completion_log(job_id)


def show(job_id: str) -> SlurmJobInfo | None:
    """``scontrol show job``; None when Slurm does not know the job (purged ``MinJobAge``
    seconds after its end), ``SlurmUnavailable`` when Slurm cannot be asked now."""
    done = _run("scontrol", "show", "job", "-o", str(job_id))
    if done.returncode:
        text = _errors(done, last=True)
        if "Invalid job id" in text:
            return None
        raise SlurmUnavailable(f"scontrol cannot say how job {job_id} is doing: {text}")
    if not done.stdout.strip():
        return None
    fields = parse_fields(done.stdout.strip().splitlines()[0])
    return _info(job_id, fields, "scontrol")


def accounting(job_id: str) -> SlurmJobInfo | None:
    """From ``sacct``; None where the site keeps no accounting ("accounting storage is disabled")."""
    if shutil.which("sacct") is None:
        return None
    done = _run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "JobID,State,ExitCode,Reason,Start,NodeList")
    rows = [line.split("|") for line in done.stdout.splitlines() if line.strip()]
    if done.returncode or not rows or len(rows[-1]) < 6:
        return None
    job, state, exit_code, reason, start, nodes = rows[-1][:6]
    return _info(
        job_id,
        {"JobState": state.split()[0], "ExitCode": exit_code, "Reason": reason, "StartTime": start, "NodeList": nodes},
        "sacct",
    )


def completion_log(job_id: str) -> SlurmJobInfo | None:
    """From the job-completion log where the site writes one as text (``jobcomp/filetxt``)."""
    path = _completion_log_path()
    if path is None:
        return None
    found = None
    try:
        with open(path, errors="replace") as log:
            for line in log:
                if line.startswith(f"JobId={job_id} "):
                    found = line  # the last record wins: a requeued job has one per attempt
    except OSError:
        return None
    return _info(job_id, parse_fields(found.strip()), "jobcomp") if found else None


def in_queue(job_id: str) -> bool:
    """Whether the job is still pending, running or being cleaned up (``squeue``)."""
    done = _run("squeue", "-h", "-j", str(job_id), "-t", ACTIVE_QUEUE_STATES, "-o", "%T")
    return done.returncode == 0 and bool(done.stdout.strip())


def scancel(job_id: str, signal: str | None = None) -> str | None:
    """Cancels the job (SIGTERM to every step and the batch shell, SIGKILL after the site's
    ``KillWait``), or with ``signal`` only signals its steps. Slurm's complaint, if any."""
    done = _run("scancel", *([f"--signal={signal}"] if signal else []), str(job_id))
    return _errors(done) if done.returncode else None


def unhealthy_nodes(nodes: str) -> list[str]:
    """Those of ``nodes`` (a Slurm node list: n[1-4]) that Slurm has down, drained or not
    responding now, each as ``n2 (down*: Not responding)``; [] when none or Slurm cannot say."""
    done = _run("sinfo", "-h", "-N", "-n", nodes, "-o", "%N|%T|%E")
    found = []
    for line in dict.fromkeys(done.stdout.splitlines() if done.returncode == 0 else []):
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if any(word in state for word in ("down", "drain", "fail", "*")):
            found.append(f"{name} ({state}" + (f": {reason}" if reason and reason != "none" else "") + ")")
    return found


def node_addresses(nodes: str) -> dict[str, str]:
    """Each of ``nodes`` (a Slurm node list: n[1-2]) with the IP address Slurm reaches it at
    (its ``NodeAddr``, resolved here when it is a name). ``SlurmUnavailable`` when Slurm
    cannot say."""
    done = _run("scontrol", "show", "hostnames", nodes)
    if done.returncode:
        raise SlurmUnavailable(f"scontrol show hostnames {nodes}: {_errors(done, last=True)}")
    found = {}
    for name in done.stdout.split():
        shown_node = _run("scontrol", "show", "node", "-o", name)
        address = parse_fields(shown_node.stdout.strip()).get("NodeAddr") if shown_node.returncode == 0 else None
        try:
            found[name] = socket.gethostbyname(address or name)
        except OSError as error:
            where = address or name
            raise SlurmUnavailable(f"node {name}'s address {where!r} does not resolve here: {error}") from None
    return found


def parse_fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of ``scontrol -o`` and the job-completion log (values may hold spaces)."""
    return dict(part.split("=", 1) for part in _FIELD.split(line) if "=" in part)


def _info(job_id: str, fields: dict[str, str], source: str) -> SlurmJobInfo:
    reason = fields.get("Reason")
    ran = fields.get("NodeList") not in (None, "", "(null)", "None assigned")  # a pending job's StartTime is a guess
    return SlurmJobInfo(
        str(job_id),
        fields.get("JobState", "UNKNOWN").split()[0],
        None if reason in (None, "", "None") else reason,
        _exit_code(fields.get("ExitCode")),
        int(fields.get("Restarts") or 0),
        _epoch(fields.get("StartTime")) if ran else None,
        source,
        fields.get("NodeList") if ran else None,
    )


def _exit_code(text: str | None) -> int | None:
    """``ExitCode=CODE:SIGNAL`` as a shell would report it: 128 + SIGNAL when a signal ended it."""
    if not text or ":" not in text:
        return None
    code, signal = (int(part) if part.isdigit() else 0 for part in text.split(":", 1))
    return 128 + signal if signal else code


def _epoch(text: str | None) -> float | None:
    try:
        return time.mktime(time.strptime(text or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None  # Unknown, None, N/A: not started


_completion_logs: dict[str, Path | None] = {}


def _completion_log_path() -> Path | None:
    """Where this cluster's text completion log is (``scontrol show config``), once per config."""
    key = Settings.from_environ().slurm_conf or ""
    if key not in _completion_logs:
        config = {}
        done = _run("scontrol", "show", "config")
        for line in done.stdout.splitlines():
            name, _, value = line.partition("=")
            config[name.strip()] = value.strip()
        filetxt = config.get("JobCompType") == "jobcomp/filetxt" and config.get("JobCompLoc")
        _completion_logs[key] = Path(config["JobCompLoc"]) if filetxt else None
    return _completion_logs[key]


def _check_configured(tool: str) -> None:
    if shutil.which(tool) is None:
        raise SlurmUnavailable(f"{tool} is not installed here")
    conf = Settings.from_environ().slurm_conf
    if conf and not Path(conf).is_file():  # Slurm itself would retry for a minute before it says so
        raise SlurmUnavailable(f"SLURM_CONF is {conf}, which does not exist")


def _not_configured(text: str) -> bool:
    return "configuration source" in text or "configuration file" in text


def _errors(done: subprocess.CompletedProcess, last: bool = False) -> str:
    """Slurm's error lines (or the last one), without the tool's prefix, on one line: what a
    person needs to read ("invalid partition specified: gpu; Batch job submission failed: ...")."""
    lines = [line.strip() for line in (done.stderr or done.stdout or "").splitlines() if line.strip()]
    if not lines:
        return f"exit code {done.returncode}"
    wanted = [re.sub(r"^\w+: (error|fatal): ", "", line) for line in lines if "error:" in line or "fatal:" in line]
    wanted = list(dict.fromkeys(wanted or lines))
    return wanted[-1] if last else "; ".join(wanted)


def _run(*cmd: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=child_environment(env) if env else None,
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(cmd), 127, "", f"{cmd[0]}: not installed here")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            list(cmd), 124, "", f"{cmd[0]}: no answer from Slurm within {TIMEOUT_S:.0f} s"
        )
