"""Slurm and Kubeflow specs generated from the same export, checked field by field (the
manifest parsed with a real YAML parser, the batch script checked by bash itself)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time

import yaml

from jiyu_magics import jobs
from jiyu_magics.core.run_files import RunFiles
from jiyu_magics.core.run_store import RunStore
from jiyu_magics.jobs.backends import Handover

from .cli_runner import jiyu
from .jobs_workload import write_notebook


BASH = shutil.which("bash")


def sbatch_options(text: str) -> dict[str, str]:
    return dict(line[len("#SBATCH --"):].split("=", 1) for line in text.splitlines() if line.startswith("#SBATCH"))


def test_slurm_batch_script_runs_one_torchrun_per_node(tmp_path, no_schedulers):
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), backend="slurm", nnodes=4, nproc=8,
                      max_restarts=2, name="big")
    files = RunFiles.of(run.id)
    script = (files.root / "job.sbatch").read_text()
    assert subprocess.run([BASH, "-n", str(files.root / "job.sbatch")]).returncode == 0
    assert sbatch_options(script) == {"job-name": "jiyu-big", "nodes": "4", "ntasks-per-node": "1",
                                      "gpus-per-node": "8", "output": f"{files.root}/slurm-%j.log",
                                      "chdir": str(tmp_path)}
    exports = dict(w.split("=", 1) for line in script.splitlines() if line.startswith("export ")
                   for w in shlex.split(line)[1:])
    assert exports["JIYU_RUN_ID"] == run.id and exports["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert exports["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    srun = shlex.split(next(line for line in script.splitlines() if line.startswith("srun ")))
    assert srun[:3] == ["srun", "--kill-on-bad-exit=1", "torchrun"]
    flags = dict(zip(srun[3:-3:2], srun[4:-3:2]))
    assert flags == {"--nnodes": "4", "--rdzv-backend": "c10d", "--rdzv-endpoint": "$head_node:29500",
                     "--rdzv-id": "$SLURM_JOB_ID", "--nproc-per-node": "8", "--max-restarts": "2"}
    assert srun[-3:] == ["-m", "jiyu_magics.jobs.process.rank_worker", str(files.script)]
    handover = Handover.load(run.id)
    assert not handover.submitted and f"sbatch {files.root}/job.sbatch" in handover.message


def test_kubeflow_pytorchjob_manifest_field_by_field(tmp_path, no_schedulers, monkeypatch):
    monkeypatch.setenv("JIYU_IMAGE", "registry.example/jiyu:1")
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), backend="kubernetes", nnodes=3, nproc=4,
                      max_restarts=1, params={"steps": 5})
    files = RunFiles.of(run.id)
    config_map, job = yaml.safe_load_all((files.root / "pytorchjob.yaml").read_text())
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == f"jiyu-{run.id}-script"
    assert config_map["data"]["job.py"] == files.script.read_text() and "steps = 5" in config_map["data"]["job.py"]
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "PyTorchJob", f"jiyu-{run.id}")
    assert job["metadata"]["labels"]["jiyu/run-id"] == run.id
    spec = job["spec"]
    assert spec["nprocPerNode"] == "4" and spec["runPolicy"]["backoffLimit"] == 1
    replicas = spec["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for replica in replicas.values():
        assert replica["restartPolicy"] == "OnFailure"
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert container["name"] == "pytorch" and container["image"] == "registry.example/jiyu:1"
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
        assert container["command"] == ["torchrun"]
        args = container["args"]
        assert dict(zip(args[:-3:2], args[1:-3:2])) == {
            "--nnodes": "3", "--rdzv-backend": "static", "--rdzv-endpoint": "$(MASTER_ADDR):$(MASTER_PORT)",
            "--node-rank": "$(PET_NODE_RANK)", "--nproc-per-node": "4", "--max-restarts": "1"}
        assert args[-3:] == ["-m", "jiyu_magics.jobs.process.rank_worker", "/jiyu-job/job.py"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["JIYU_RUN_ID"] == run.id and env["JIYU_HOME"] == "/jiyu"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"script": "/jiyu-job", "runs": "/jiyu", "dshm": "/dev/shm"}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["script"]["configMap"]["name"] == f"jiyu-{run.id}-script"
        assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "jiyu-runs"
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


def test_single_node_kubernetes_job_has_no_workers_and_a_standalone_rendezvous(tmp_path, no_schedulers):
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), backend="kubernetes", nproc=2)
    _, job = yaml.safe_load_all((RunFiles.of(run.id).root / "pytorchjob.yaml").read_text())
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"]
    args = replicas["Master"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "--standalone" and "--rdzv-endpoint" not in args


def test_handed_over_runs_stay_queued_and_are_never_marked_lost(tmp_path, no_schedulers):
    run = jobs.submit(write_notebook(tmp_path / "nb.ipynb"), backend="slurm")
    RunStore().update(run.id, created=time.time() - 3600)  # long past the grace for unstarted local runs
    assert {r.id: r.status for r in jobs.list_runs()}[run.id] == "queued"


def test_cli_prints_the_manifest_when_kubectl_is_missing(tmp_path, no_schedulers):
    done = jiyu("submit", str(write_notebook(tmp_path / "nb.ipynb")), "--backend", "kubernetes", "--nproc", "2")
    assert done.returncode == 0, done.stderr
    assert "kubectl is not installed here" in done.stdout
    manifest = done.stdout[done.stdout.index("# Kubeflow PyTorchJob"):]
    kinds = [doc["kind"] for doc in yaml.safe_load_all(manifest)]
    assert kinds == ["ConfigMap", "PyTorchJob"]


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
    documents = list(yaml.safe_load_all((RunFiles.of(k8s.id).root / "pytorchjob.yaml").read_text()))
    assert [d["kind"] for d in documents] == ["ConfigMap", "PyTorchJob"]
