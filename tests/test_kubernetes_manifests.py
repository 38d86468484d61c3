"""Kubeflow manifests, validated against the CRDs' own OpenAPI schemas (tests/data/kubeflow,
vendored from kubeflow/trainer with their versions noted there) as strictly as
``kubectl apply --validate=strict`` would: an unknown field is an error, not pruned.

No Kubernetes cluster is reachable here: what a cluster would add (the CRDs' CEL rules, the
runtime's existence, scheduling) is not checked, and kubectl's apply/get/delete against a live
API server is untested. The real ``kubectl`` is used where it answers without a cluster."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from jiyu_magics import jobs
from jiyu_magics.core.runs.files import RunFiles
from jiyu_magics.core.runs.model import RunStatus
from jiyu_magics.core.store.run_store import RunStore
from jiyu_magics.jobs.backends.kubernetes.states import state_of
from jiyu_magics.jobs.process import node_records, rank_records

from .cli_runner import jiyu
from .conftest import REQUIRE_SERVICES_ENV
from .jobs_workload import write_notebook

SCHEMAS = Path(__file__).parent / "data" / "kubeflow"
SCHEMA_OF = {"TrainJob": "trainjob.trainer.kubeflow.org.v1alpha1.json", "PyTorchJob": "pytorchjob.kubeflow.org.v1.json"}
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # the TrainJob CRD's CEL rule for metadata.name


def strict(schema):
    """The schema with unknown fields refused wherever it lists the fields (kubectl's strict
    field validation; an API server would otherwise drop a misspelt field without a word)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        return schema
    return [strict(v) for v in schema] if isinstance(schema, list) else schema


def validator(kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(json.loads((SCHEMAS / SCHEMA_OF[kind]).read_text())))


def check(job: dict) -> None:
    errors = sorted(validator(job["kind"]).iter_errors(job), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
    assert DNS_LABEL.match(job["metadata"]["name"]) and len(job["metadata"]["name"]) <= 63


def submitted(tmp_path, **options) -> tuple[dict, dict, RunFiles]:
    run = jobs.submit(write_notebook(tmp_path / "train.ipynb"), backend="kubernetes", **options)
    files = RunFiles.of(run.id)
    config_map, job = yaml.safe_load_all((files.root / "kubernetes.yaml").read_text())
    return config_map, job, files


@pytest.mark.parametrize("kind", [None, "pytorchjob"])
@pytest.mark.parametrize("nnodes", [1, 3])
def test_every_manifest_passes_its_crd_schema(tmp_path, no_schedulers, kind, nnodes):
    config_map, job, files = submitted(
        tmp_path, nnodes=nnodes, nproc=4, max_restarts=1, k8s_kind=kind, name="lr=3e-4 {odd}: name"
    )
    check(job)
    assert job["kind"] == ("PyTorchJob" if kind else "TrainJob")
    assert config_map["data"]["job.py"] == files.script.read_text()


def test_the_schema_check_refuses_what_a_cluster_would(tmp_path, no_schedulers):
    """The check can fail: a misspelt field, a wrong type and a missing required field."""
    _, job, _ = submitted(tmp_path, nproc=2)
    for spoil in (
        lambda j: j["spec"]["trainer"].update(numProcsPerNode=2),
        lambda j: j["spec"]["trainer"].update(numNodes="two"),
        lambda j: j["spec"].pop("runtimeRef"),
    ):
        bad = copy.deepcopy(job)
        spoil(bad)
        with pytest.raises(AssertionError):
            check(bad)


def test_trainjob_is_the_default_field_by_field(tmp_path, no_schedulers, monkeypatch):
    monkeypatch.setenv("JIYU_IMAGE", "registry.example/jiyu:1")
    config_map, job, files = submitted(tmp_path, nnodes=3, nproc=4, max_restarts=1, params={"steps": 5})
    run_id = files.root.name
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == (
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        f"jiyu-{run_id}",
    )
    assert job["metadata"]["labels"]["jiyu/run-id"] == run_id and "steps = 5" in config_map["data"]["job.py"]
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    trainer = spec["trainer"]
    assert (trainer["image"], trainer["numNodes"], trainer["numProcPerNode"]) == ("registry.example/jiyu:1", 3, 4)
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 4}}
    # the runtime's torch plugin gives torchrun its nodes, ranks and master through PET_* variables;
    # each pod checks its way to the first pod (node_launch) and torchrun waits at most 180 s for the others
    assert trainer["command"] == ["python"] and "--nnodes" not in trainer["args"]
    assert trainer["args"] == [
        *("-m", "jiyu_magics.jobs.process.node_launch", "--rdzv", "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)"),
        *("--join-timeout", "180", "--resolve-timeout", "60", "--"),
        *("torchrun", "--rdzv-conf", "timeout=180", "--max-restarts", "1"),
        *("-m", "jiyu_magics.jobs.process.rank_worker", "/jiyu-job/job.py"),
    ]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["JIYU_RUN_ID"] == run_id and env["JIYU_HOME"] == "/jiyu"
    (patch,) = spec["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert node["name"] == "node" and pod["containers"][0]["name"] == "node"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"script": "/jiyu-job", "runs": "/jiyu", "dshm": "/dev/shm"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["script"]["configMap"]["name"] == config_map["metadata"]["name"] == f"jiyu-{run_id}-script"
    assert volumes["runs"]["persistentVolumeClaim"]["claimName"] == "jiyu-runs"


def test_pytorchjob_field_by_field(tmp_path, no_schedulers, monkeypatch):
    monkeypatch.setenv("JIYU_IMAGE", "registry.example/jiyu:1")
    _, job, files = submitted(tmp_path, nnodes=3, nproc=4, max_restarts=1, k8s_kind="pytorchjob")
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    spec = job["spec"]
    assert spec["nprocPerNode"] == "4" and spec["runPolicy"]["backoffLimit"] == 1
    replicas = spec["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == "registry.example/jiyu:1"
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 4} and container["command"] == ["python"]
        split = container["args"].index("--") + 1
        checks, torchrun = container["args"][:split], container["args"][split:]
        assert checks[:4] == ["-m", "jiyu_magics.jobs.process.node_launch", "--rdzv", "$(MASTER_ADDR):$(MASTER_PORT)"]
        assert torchrun[0] == "torchrun"
        args = torchrun[1:]
        assert dict(zip(args[:-3:2], args[1:-3:2], strict=False)) == {
            "--rdzv-conf": "timeout=180",
            "--nnodes": "3",
            "--rdzv-backend": "static",
            "--rdzv-endpoint": "$(MASTER_ADDR):$(MASTER_PORT)",
            "--node-rank": "$(PET_NODE_RANK)",
            "--nproc-per-node": "4",
            "--max-restarts": "1",
        }


def test_a_single_node_pytorchjob_has_no_workers_and_a_standalone_rendezvous(tmp_path, no_schedulers):
    _, job, _ = submitted(tmp_path, nproc=2, k8s_kind="pytorchjob")
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert list(replicas) == ["Master"]
    args = replicas["Master"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "--standalone" and "--rdzv-endpoint" not in args


def test_cli_prints_the_manifest_and_the_command_when_kubectl_is_missing(tmp_path, no_schedulers):
    done = jiyu("submit", str(write_notebook(tmp_path / "nb.ipynb")), "--backend", "kubernetes", "--nproc", "2")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert "kubectl is not installed here; apply this manifest on the cluster with `kubectl apply -f " in first
    manifest = done.stdout[done.stdout.index("# Kubeflow TrainJob") :]
    documents = list(yaml.safe_load_all(manifest))
    assert [d["kind"] for d in documents] == ["ConfigMap", "TrainJob"]
    check(documents[1])
    (run,) = RunStore().list()
    assert run.status == "queued" and run.queue_reason.startswith("not applied: run `kubectl apply -f ")


def test_kubectl_without_a_cluster_is_one_line_and_the_run_waits(tmp_path, monkeypatch):
    """The real kubectl with an empty kubeconfig: no cluster to apply to."""
    if shutil.which("kubectl") is None:
        reason = "kubectl is not installed: `make test-system-deps` installs Debian's kubernetes-client"
        pytest.fail(reason) if os.environ.get(REQUIRE_SERVICES_ENV) == "1" else pytest.skip(reason)
    (tmp_path / "kubeconfig").write_text("")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    done = jiyu(
        "submit", str(write_notebook(tmp_path / "nb.ipynb")), "--backend", "kubernetes", "--k8s-kind", "pytorchjob"
    )
    assert done.returncode == 0, done.stderr
    assert "kubectl has no cluster configured here (" in done.stdout.splitlines()[0]
    assert "# Kubeflow PyTorchJob" in done.stdout
    (run,) = RunStore().list()
    assert jiyu("stop", run.id).returncode == 0
    assert RunStore().get(run.id).status == "stopped"


def test_kubernetes_job_states_map_to_run_statuses():
    """Status objects as the controllers write them (and as the CRDs' status schemas allow)."""

    def job(kind, status):
        schema = strict(json.loads((SCHEMAS / SCHEMA_OF[kind]).read_text()))["properties"]["status"]
        jsonschema.Draft7Validator(schema).validate(status)  # a status the controller could write
        return {"kind": kind, "status": status}

    def condition(kind, reason=None, message=""):
        return {
            "type": kind,
            "status": "True",
            "reason": reason or kind,
            "message": message,
            "lastTransitionTime": "2026-11-30T12:00:00Z",
        }

    trainjob = lambda **status: state_of("TrainJob", job("TrainJob", status))  # noqa: E731
    assert state_of("TrainJob", {"kind": "TrainJob"}).reason == "created"  # no status written yet

    def child(ready, active):
        return {"name": "node", "ready": ready, "active": active, "failed": 0, "succeeded": 0, "suspended": 0}

    assert trainjob(jobsStatus=[child(0, 1)]).reason == "pods starting"
    assert trainjob(jobsStatus=[child(1, 1)]).status is RunStatus.RUNNING
    assert (
        trainjob(conditions=[condition("Suspended", "Suspended", "held by Kueue")]).reason == "Suspended: held by Kueue"
    )
    done = trainjob(conditions=[condition("Complete", "JobsCompleted", "jobs completed")])
    assert (done.status, done.exit_code) == (RunStatus.SUCCEEDED, 0)
    failed = trainjob(conditions=[condition("Failed", "BackoffLimitExceeded", "node-0 failed")])
    assert (failed.exit_code, failed.error) == (1, "Kubernetes: BackoffLimitExceeded: node-0 failed")
    pytorch = lambda *conditions: state_of("PyTorchJob", job("PyTorchJob", {"conditions": list(conditions)}))  # noqa: E731
    assert pytorch(condition("Created")).reason == "Created"
    assert pytorch(condition("Created"), condition("Running")).status is RunStatus.RUNNING
    assert pytorch(condition("Created"), condition("Running"), condition("Succeeded")).exit_code == 0
    deleted = state_of("TrainJob", None)
    assert deleted.status is RunStatus.STOPPED and deleted.cancelled and deleted.over


def test_a_trainjob_pod_checks_its_way_to_the_first_pod_before_torchrun(tmp_path, no_schedulers):
    """A pod's command line as the kubelet runs it ($(VAR) expanded from the variables the
    runtime's torch plugin sets), run on this machine: the second pod of a TrainJob to which the
    first pod's address resolves to itself fails at once, with one line naming it, in its node
    record and its log, and torchrun never starts (it would wait alone for the join timeout)."""
    _, job, files = submitted(tmp_path, nnodes=2, nproc=1)
    trainer = job["spec"]["trainer"]
    pod_env = {e["name"]: e["value"] for e in trainer["env"]}
    pod_env.update(PET_MASTER_ADDR="localhost", PET_MASTER_PORT="29400", PET_NODE_RANK="1", PET_NNODES="2")
    pod_env["JIYU_HOME"] = os.environ["JIYU_HOME"]  # the shared volume, mounted at /jiyu in the pod
    words = [re.sub(r"\$\((\w+)\)", lambda m: pod_env[m[1]], word) for word in trainer["command"] + trainer["args"]]
    assert words[0] == "python"
    done = subprocess.run(
        [sys.executable, *words[1:]], env={**os.environ, **pod_env}, capture_output=True, text=True, timeout=60
    )
    host = socket.gethostname()
    said = f"node {host}: the rendezvous host localhost resolves to 127.0.0.1"
    assert done.returncode == 78 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    (record,) = node_records.read_all(files.root.name)
    assert record.node_rank == 1 and record.error.startswith(said) and f"an address of {host} itself" in record.error
    assert not (files.root / "torchrun").exists() and not rank_records.read_all(files.root.name)
