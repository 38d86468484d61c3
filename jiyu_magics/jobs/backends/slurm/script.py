"""The Slurm batch script of a run: one ``srun`` task per node, each checking its way to the
rendezvous (``jobs.process.node_launch``) and then running ``torchrun`` for that node's ranks,
all meeting at a c10d rendezvous on the first node of the allocation, within the join timeout.

The first node is where the batch script runs (Slurm runs it on the allocation's first node),
so its name is ``$SLURMD_NODENAME`` there: no ``scontrol`` is needed to find it (a container
without Slurm's tools would otherwise leave it empty, and every node would rendezvous with
itself). Each node's rank is read by its own task, never expanded by the batch shell.

The job writes into the run's folder on the shared path (``JIYU_HOME``): its output is the
run's ``stdout.log`` (appended, so a requeued attempt adds to it), rank 0 writes the event log
and checkpoints there, every rank its record. So progress, loss and logs are read exactly as
for a local job.

Time limit and preemption: Slurm signals the batch shell (``--signal=B:USR1@GRACE``) GRACE
seconds before the limit. The shell passes USR1 to the ranks through srun and torchrun (told to
forward it, not to die of it); the engine checkpoints at the next step both ranks agree on and
ends the rank; the shell then requeues the job (``scontrol requeue``), whose next attempt resumes
from that checkpoint (``JIYU_RESUME=last``), up to ``--max-requeues`` times. The job is submitted
``--no-requeue`` and made requeueable only for that moment: a node that fails ends the run with
Slurm's line naming the node, instead of leaving it pending for a node that may not return.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ....core.runs.files import RUN_ID_ENV, RunFiles, jiyu_home
from ....core.runs.names import scheduler_slug
from ....core.settings import HOME_ENV
from ....core.store.run_row import Run
from ....core.text import shown
from ...job_error import JobError
from ...launch_spec import LaunchSpec
from ...process import torchrun_command as torchrun
from .options import SlurmOptions

SCRIPT_NAME = "job.sbatch"
JOB_ID_FILE = "slurm-job-id"  # the job writes its id here: a script submitted by hand is found too
OUT_OF_REQUEUES_EXIT = 75  # sysexits' EX_TEMPFAIL: time ran out, no requeue left; retry later
FORWARDED_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"  # torchrun's defaults plus the time-limit signal
FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


def render(
    run: Run,
    spec: LaunchSpec,
    files: RunFiles,
    options: SlurmOptions,
    python: str | None = None,
    script: Path | None = None,
) -> str:
    """The batch script; ``python`` is the interpreter the ranks run (default: this one, which
    on a cluster lives on the shared path like the run folder); ``script`` what each rank runs
    (default: the run's exported script; a ranks pool's ``ranks.py``)."""
    python = python or sys.executable
    lines = [
        "#!/bin/bash",
        f"# Slurm job for jiyu run {run.id} ({run.name!r}), exported from {run.notebook!r}.",
        "# jiyu submits it with `sbatch --parsable` and follows it by its job id.",
        *(f"#SBATCH {directive}" for directive in directives(run, spec, files, options)),
        *_environment(run, files, python),
        *_attempt(options),
        *_follower(run, spec),
        *_launch(spec, script or files.script, files, python, options.join_timeout),
        *_ending(options),
    ]
    return "\n".join(lines) + "\n"


def directives(run: Run, spec: LaunchSpec, files: RunFiles, options: SlurmOptions) -> list[str]:
    gpus = options.gpus(spec.nproc)
    found = [
        f"--job-name=jiyu-{scheduler_slug(run.name)}",
        f"--nodes={spec.nnodes}",
        "--ntasks-per-node=1",
        f"--gres=gpu:{gpus}" if gpus else f"--cpus-per-task={spec.nproc}",
        f"--output={_path_value(files.log)}",
        "--open-mode=append",
        f"--chdir={_path_value(run.cwd)}",
        f"--signal=B:USR1@{options.checkpoint_grace}",
        "--no-requeue",  # a node failure ends the run; the time limit's requeue is the script's own
    ]
    for flag, value in (
        ("time", options.time),
        ("partition", options.partition),
        ("account", options.account),
        ("qos", options.qos),
        ("constraint", options.constraint),
        ("mem", options.mem),
    ):
        if value is not None:
            found.append(f"--{flag}={value}")
    return found + list(options.sbatch_args)


def _path_value(path: object) -> str:
    """A folder or file in an ``#SBATCH`` line: a newline in it would end the comment and run
    the rest as the batch script's code, so a path with control characters is refused; one
    with spaces is double-quoted, as sbatch reads its directives."""
    text = str(path)
    if not text.isprintable():
        raise JobError(f"the path {shown(text)} cannot go into a Slurm batch script (it holds control characters)")
    return f'"{text}"' if any(c.isspace() for c in text) and '"' not in text else text


def _environment(run: Run, files: RunFiles, python: str) -> list[str]:
    exports = {
        RUN_ID_ENV: run.id,
        HOME_ENV: str(jiyu_home()),
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": torchrun.LINE_PREFIX_TEMPLATE,
        "TORCHELASTIC_SIGNALS_TO_HANDLE": FORWARDED_SIGNALS,
        **torchrun.STORE_SETTINGS,
    }
    return [
        "set -uo pipefail",
        *(f"export {name}={shlex.quote(value)}" for name, value in exports.items()),
        f"python={shlex.quote(python)}",
        f"printf '%s\\n' \"$SLURM_JOB_ID\" > {shlex.quote(str(files.root / JOB_ID_FILE))}",
    ]


def _attempt(options: SlurmOptions) -> list[str]:
    return [
        "attempt=${SLURM_RESTART_COUNT:-0}",
        "# a requeued attempt resumes from the newest checkpoint of this run, and is not requeueable again",
        'if [ "$attempt" -gt 0 ]; then',
        "  export JIYU_RESUME=last",
        '  scontrol update JobId="$SLURM_JOB_ID" Requeue=0 2>/dev/null',
        "fi",
        "# the first node of the allocation runs this script and hosts the rendezvous, on a port free there",
        'head_node="${SLURMD_NODENAME:-$(hostname -s)}"',
        f'port=$("$python" -c {shlex.quote(FREE_PORT)})',
        'echo "[jiyu] $(date +%H:%M:%S) Slurm job $SLURM_JOB_ID, attempt $((attempt + 1)), on $SLURM_JOB_NODELIST"',
        "near_limit=0 step=",
        f"trap 'near_limit=1; echo \"[jiyu] $(date +%H:%M:%S) {options.checkpoint_grace} s to the time limit: "
        'checkpointing"; if [ -n "$step" ]; then kill -USR1 "$step"; fi\' USR1',
    ]


def _follower(run: Run, spec: LaunchSpec) -> list[str]:
    """The trackers' follower of this attempt, beside the ranks on the first node: a scheduled
    run has no owner process while it runs, so the allocation feeds the trackers itself
    (``--track`` of the submission, and whatever the notebook's ``%%train --track`` cells name).
    It ends after the step (SIGTERM: it reads the rest of the log); the owner that records the
    run's end brings the trackers up to it (``trackers.owner``)."""
    tracks = "".join(f" --track {shlex.quote(track)}" for track in spec.track or [])
    return [
        "# the trackers' follower (python -m jiyu_magics.trackers): reads the event log, never the ranks",
        f'"$python" -m jiyu_magics.trackers follow {shlex.quote(run.id)}{tracks} </dev/null &',
        "follower=$!",
    ]


def _launch(spec: LaunchSpec, script: Path, files: RunFiles, python: str, join_timeout: int) -> list[str]:
    cmd = torchrun.command(
        script,
        spec.nproc,
        nnodes=spec.nnodes,
        rdzv_endpoint="$head_node:$port",
        rdzv_id="$SLURM_JOB_ID",
        rdzv_conf=torchrun.join_timeout_conf(join_timeout),
        max_restarts=spec.max_restarts,
        log_dir=files.root / "torchrun",
        launcher=["$python", "-m", "torch.distributed.run"],
    )
    cmd[cmd.index("--nnodes") + 1] = "$SLURM_NNODES"
    node = torchrun.node_launch("$head_node:$port", join_timeout, launcher=["$python"])
    return [
        'if [ "$near_limit" = 0 ]; then',
        "  srun --kill-on-bad-exit=1 " + " ".join(map(_quote, node + cmd)) + " &",
        "  step=$!",
        "fi",
        "code=0",
        'if [ -n "$step" ]; then',
        '  wait "$step"; code=$?',
        "  # a trapped signal ends `wait` early: wait again until the step has ended",
        '  while kill -0 "$step" 2>/dev/null; do wait "$step"; code=$?; done',
        "fi",
    ]


def _ending(options: SlurmOptions) -> list[str]:
    requeue = [
        f'  if [ "$attempt" -lt {options.max_requeues} ]; then',
        f'    echo "[jiyu] $(date +%H:%M:%S) requeued ($((attempt + 1)) of {options.max_requeues})"',
        "    # requeueable for this requeue only (the job is submitted --no-requeue); the next attempt",
        "    # makes it not requeueable again",
        '    scontrol update JobId="$SLURM_JOB_ID" Requeue=1 && scontrol requeue "$SLURM_JOB_ID" && exit 0',
        '    echo "[jiyu] $(date +%H:%M:%S) the requeue failed (scontrol above)"',
        "  fi",
    ]
    return [
        'kill -TERM "$follower" 2>/dev/null; wait "$follower"',
        'if [ "$near_limit" = 1 ]; then',
        *(requeue if options.max_requeues else []),
        f'  echo "[jiyu] $(date +%H:%M:%S) time limit reached, no requeue left (--max-requeues '
        f'{options.max_requeues})"',
        f"  exit {OUT_OF_REQUEUES_EXIT}",
        "fi",
        'exit "$code"',
    ]


def _quote(word: str) -> str:
    """Shell-quote, except the variables the batch script itself sets, which must expand."""
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)
