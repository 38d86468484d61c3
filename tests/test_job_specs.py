"""Slurm and Kubeflow specs generated from the same export, checked field by field (the
manifest parsed with a real YAML parser, the batch script checked by bash itself)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time

import yaml

from jiyu_magics import jobs
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.backends.handover import Handover

from .cli_runner import jiyu
from .jobs_workload import write_notebook

BASH = shutil.which("bash")


def sbatch_options(text: str) -> dict[str, str | None]:
    """``#SBATCH --name=value`` lines as name -> value (None for a flag without a value)."""
    pairs = [line[len("#SBATCH --") :].partition("=") for line in text.splitlines() if line.startswith("#SBATCH")]
    return {name: value if sep else None for name, sep, value in pairs}


def test_slurm_batch_script_runs_one_torchrun_per_node(tmp_path, no_schedulers):
    run = jobs.submit(
        write_notebook(tmp_path / "train.ipynb"),
        backend="slurm",
        nnodes=4,
        nproc=8,
        max_restarts=2,
        name="big",
        slurm={
            "time": "2:00:00",
            "partition": "gpu",
            "account": "lab",
            "qos": "high",
            "constraint": "a100&ib",
            "mem": "64G",
            "sbatch_args": ["--exclusive", "--nice=10"],
        },
    )
    files = RunFiles.of(run.id)
    script = (files.root / "job.sbatch").read_text()
    assert subprocess.run([BASH, "-n", str(files.root / "job.sbatch")]).returncode == 0
    assert sbatch_options(script) == {
        "job-name": "jiyu-big",
        "nodes": "4",
        "ntasks-per-node": "1",
        "gres": "gpu:8",
        "output": str(files.log),
        "open-mode": "append",
        "chdir": str(tmp_path),
        "signal": "B:USR1@120",
        "no-requeue": None,  # a failed node ends the run; the time limit's requeue is the script's own
        "time": "2:00:00",
        "partition": "gpu",
        "account": "lab",
        "qos": "high",
        "constraint": "a100&ib",
        "mem": "64G",
        "exclusive": None,
        "nice": "10",
    }
    exports = dict(
        w.split("=", 1) for line in script.splitlines() if line.startswith("export ") for w in shlex.split(line)[1:]
    )
    assert exports["JIYU_RUN_ID"] == run.id and exports["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert exports["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert "SIGUSR1" in exports["TORCHELASTIC_SIGNALS_TO_HANDLE"].split(",")
    # the first node is where the batch script runs: no scontrol needed to name it
    assert 'head_node="${SLURMD_NODENAME:-$(hostname -s)}"' in script and "scontrol show hostnames" not in script
    srun = shlex.split(next(line for line in script.splitlines() if line.strip().startswith("srun ")))
    # each node checks its way to the rendezvous (node_launch), then becomes torchrun
    split = srun.index("--") + 1
    assert srun[:split] == [
        *("srun", "--kill-on-bad-exit=1", "$python", "-m", "jiyu_magics.jobs.process.node_launch"),
        *("--rdzv", "$head_node:$port", "--join-timeout", "180", "--"),
    ]
    srun = srun[split - 2 :]  # the torchrun command, as it was before the checks: srun's two words first
    assert srun[2:5] == ["$python", "-m", "torch.distributed.run"]
    flags = dict(zip(srun[5:-4:2], srun[6:-4:2], strict=False))
    assert flags == {
        "--nnodes": "$SLURM_NNODES",
        "--rdzv-backend": "c10d",
        "--rdzv-endpoint": "$head_node:$port",
        "--rdzv-id": "$SLURM_JOB_ID",
        "--rdzv-conf": "join_timeout=180,read_timeout=180",  # not torch's 600 s and 60 s
        "--nproc-per-node": "8",
        "--max-restarts": "2",
        "--log-dir": str(files.root / "torchrun"),
        "--tee": "3",
    }  # [rankN]: lines, as for local jobs
    assert srun[-4:] == ["-m", "jiyu_magics.jobs.process.rank_worker", str(files.script), "&"]
    handover = Handover.load(run.id)
    assert not handover.submitted and f"sbatch {files.root}/job.sbatch" in handover.message


def test_a_cpu_slurm_job_asks_for_cpus_and_is_never_requeued_when_told_so(tmp_path, no_schedulers):
    run = jobs.submit(
        write_notebook(tmp_path / "train.ipynb"),
        backend="slurm",
        nproc=3,
        slurm={"gpus_per_node": 0, "max_requeues": 0},
    )
    options = sbatch_options((RunFiles.of(run.id).root / "job.sbatch").read_text())
    script = (RunFiles.of(run.id).root / "job.sbatch").read_text()
    assert options["cpus-per-task"] == "3" and "gres" not in options
    assert "no-requeue" in options and "requeue" not in options and "scontrol requeue" not in script


def test_a_run_not_submitted_waits_saying_how_and_a_stop_withdraws_it(tmp_path, no_schedulers):
    """Without sbatch the batch script is written and the run waits for it to be submitted on
    the cluster, saying so; it is never marked lost, and a stop ends it before it started."""
    run = jobs.submit(write_notebook(tmp_path / "nb.ipynb"), backend="slurm")
    RunStore().update(run.id, created=time.time() - 3600)  # long past the grace for unstarted local runs
    listed = {r.id: r for r in jobs.list_runs()}[run.id]
    assert listed.status == "queued" and listed.queue_reason.startswith("not submitted: run `sbatch ")
    done = jiyu("jobs")
    assert f"queued (not submitted: run `sbatch {RunFiles.of(run.id).root}/job.sbatch`" in done.stdout
    stopped = jobs.stop(run.id)
    assert (stopped.status, stopped.error) == ("stopped", "stopped before it started")


def test_a_run_name_cannot_forge_lines_in_a_batch_script_or_a_manifest(tmp_path, no_schedulers):
    nb = write_notebook(tmp_path / "train.ipynb")
    for bad in ("a\ntouch pwned\n#", "x\x1b[2Jy"):
        done = jiyu("submit", str(nb), "--backend", "slurm", "--name", bad)
        assert done.returncode == 2 and "one line of printable text" in done.stderr, done.stderr
    assert RunStore().list() == []
    run = jobs.submit(nb, backend="slurm", name="lr=3e-4; rm -rf ~ $(id)")
    script = (RunFiles.of(run.id).root / "job.sbatch").read_text()
    assert "#SBATCH --job-name=jiyu-lr-3e-4-rm--rf-id" in script
    assert subprocess.run([BASH, "-n", str(RunFiles.of(run.id).root / "job.sbatch")]).returncode == 0
    k8s = jobs.submit(nb, backend="kubernetes", name="k8s: {x: 1} # kind: Secret")
    documents = list(yaml.safe_load_all((RunFiles.of(k8s.id).root / "kubernetes.yaml").read_text()))
    assert [d["kind"] for d in documents] == ["ConfigMap", "TrainJob"]
