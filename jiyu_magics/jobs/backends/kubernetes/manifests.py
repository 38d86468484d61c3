"""The Kubernetes objects of a run: a ConfigMap holding the exported script, and the training
job itself, a Kubeflow Trainer v2 ``TrainJob`` (the default) or, for clusters on the older
training operator, a ``PyTorchJob``.

Every pod is one node running ``torchrun`` for its ``nproc`` ranks with ``nvidia.com/gpu:
nproc``; the run's home folder is a shared volume (``JIYU_K8S_CLAIM``) mounted as
``JIYU_HOME``, so events, logs and checkpoints outlive the pods and are read as for a local job.

``TrainJob`` refers to the ``torch-distributed`` ClusterTrainingRuntime, whose torch plugin
sets torchrun's ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_*`` in
every node; volumes come in through ``runtimePatches`` (the container's env through
``spec.trainer.env``, as the runtime requires). ``PyTorchJob`` has one Master and
``nnodes - 1`` Workers, the operator setting ``MASTER_ADDR``/``MASTER_PORT``/``PET_NODE_RANK``.

A job of several nodes starts each pod with the same checks as a Slurm job's nodes
(``jobs.process.node_launch``): the first pod's name resolves in this pod (waiting a minute for
the cluster's DNS to list a new pod) and not to this pod itself; then torchrun, whose static
rendezvous waits at most the join timeout for every node (``--rdzv-conf timeout``, 600 s by
default). No Kubernetes API server can run
on the machines the tests run on: the manifests are checked against the CRDs' own schemas.
"""

from __future__ import annotations

from ....core.runs.files import RUN_ID_ENV, RunFiles
from ....core.settings import HOME_ENV, Settings
from ....core.store.run_row import Run
from ...launch_spec import LaunchSpec
from ...process import torchrun_command as torchrun

MANIFEST_NAME = "kubernetes.yaml"
# The image built from images/ (override with JIYU_IMAGE), and the claim of the shared volume.
DEFAULT_IMAGE = "jiyu/pytorch-lab:2.13.0-cuda13.0"
DEFAULT_CLAIM = "jiyu-runs"
POD_HOME, POD_SCRIPT_DIR, POD_WORKDIR = "/jiyu", "/jiyu-job", "/workspace"
TRAINJOB_API, PYTORCHJOB_API = "trainer.kubeflow.org/v1alpha1", "kubeflow.org/v1"
RUNTIME = "torch-distributed"  # the ClusterTrainingRuntime Kubeflow Trainer installs
PATCH_MANAGER = "jiyu.dev/jiyu-magics"
KINDS = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob"}
JOIN_TIMEOUT_S = 180  # every pod of a multi-node job reaches the rendezvous within this
RESOLVE_TIMEOUT_S = 60  # a new pod's name reaches the cluster's DNS within this


def job_name(run_id: str) -> str:
    return f"jiyu-{run_id}"  # a DNS label: a letter first, then the run id's hex digits


def manifests(
    run: Run, spec: LaunchSpec, files: RunFiles, image: str | None = None, claim: str | None = None
) -> list[dict]:
    settings = Settings.from_environ()
    image = image or settings.image or DEFAULT_IMAGE
    claim = claim or settings.k8s_claim or DEFAULT_CLAIM
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{job_name(run.id)}-script", "labels": labels(run)},
        "data": {"job.py": files.script.read_text()},
    }
    build = pytorchjob if spec.k8s_kind == "pytorchjob" else trainjob
    return [config_map, build(run, spec, image, claim)]


def labels(run: Run) -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "jiyu", "jiyu/run-id": run.id}


def trainjob(run: Run, spec: LaunchSpec, image: str, claim: str) -> dict:
    args = ["--max-restarts", str(spec.max_restarts), "-m", torchrun.WORKER_MODULE, f"{POD_SCRIPT_DIR}/job.py"]
    command = ["torchrun"]
    if spec.nnodes > 1:  # the runtime's PET_* variables name the first pod; each pod checks its way there
        checks = _node_checks("$(PET_MASTER_ADDR):$(PET_MASTER_PORT)")
        command, args = checks[:1], [*checks[1:], "torchrun", "--rdzv-conf", _static_timeout(), *args]
    pod = {"containers": [{"name": "node", "volumeMounts": _mounts()}], "volumes": _volumes(run, claim)}
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}
            }
        },
    }
    return {
        "apiVersion": TRAINJOB_API,
        "kind": "TrainJob",
        "metadata": {"name": job_name(run.id), "labels": labels(run)},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": RUNTIME},
            "trainer": {
                "image": image,
                "command": command,
                "args": args,
                "env": _env(run),
                "numNodes": spec.nnodes,
                "numProcPerNode": spec.nproc,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": spec.nproc}},
            },
            "runtimePatches": [patch],
        },
    }


def pytorchjob(run: Run, spec: LaunchSpec, image: str, claim: str) -> dict:
    replicas = {"Master": _replica(1, image, claim, run, spec)}
    if spec.nnodes > 1:
        replicas["Worker"] = _replica(spec.nnodes - 1, image, claim, run, spec)
    return {
        "apiVersion": PYTORCHJOB_API,
        "kind": "PyTorchJob",
        "metadata": {"name": job_name(run.id), "labels": labels(run)},
        "spec": {
            "nprocPerNode": str(spec.nproc),
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts},
            "pytorchReplicaSpecs": replicas,
        },
    }


def _replica(count: int, image: str, claim: str, run: Run, spec: LaunchSpec) -> dict:
    script = f"{POD_SCRIPT_DIR}/job.py"
    if spec.nnodes == 1:
        cmd = torchrun.command(script, spec.nproc, max_restarts=spec.max_restarts, launcher=["torchrun"])
    else:  # static rendezvous at the Master's service, node ranks as the operator numbers the pods
        cmd = torchrun.command(
            script,
            spec.nproc,
            nnodes=spec.nnodes,
            rdzv_endpoint="$(MASTER_ADDR):$(MASTER_PORT)",
            node_rank=0,
            max_restarts=spec.max_restarts,
            launcher=["torchrun"],
        )
        cmd[cmd.index("--node-rank") + 1] = "$(PET_NODE_RANK)"
        cmd[1:1] = ["--rdzv-conf", _static_timeout()]
        cmd = [*_node_checks("$(MASTER_ADDR):$(MASTER_PORT)"), *cmd]
    container = {
        "name": "pytorch",  # the operator finds the training container by this name
        "image": image,
        "command": cmd[:1],
        "args": cmd[1:],
        "workingDir": POD_WORKDIR,
        "env": _env(run),
        "resources": {"limits": {"nvidia.com/gpu": spec.nproc}},
        "volumeMounts": _mounts(),
    }
    return {
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": {"labels": {"jiyu/run-id": run.id}},
            "spec": {"containers": [container], "volumes": _volumes(run, claim)},
        },
    }


def _node_checks(rdzv_endpoint: str) -> list[str]:
    """The pod's checks before torchrun (``process.node_launch``), as a command line."""
    return torchrun.node_launch(rdzv_endpoint, JOIN_TIMEOUT_S, launcher=["python"], resolve_timeout=RESOLVE_TIMEOUT_S)


def _static_timeout() -> str:
    return torchrun.join_timeout_conf(JOIN_TIMEOUT_S, static=True)


def _env(run: Run) -> list[dict]:
    values = {
        RUN_ID_ENV: run.id,
        HOME_ENV: POD_HOME,
        "PYTHONUNBUFFERED": "1",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": torchrun.LINE_PREFIX_TEMPLATE,
        **torchrun.STORE_SETTINGS,
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def _mounts() -> list[dict]:
    return [
        {"name": "script", "mountPath": POD_SCRIPT_DIR, "readOnly": True},
        {"name": "runs", "mountPath": POD_HOME},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]


def _volumes(run: Run, claim: str) -> list[dict]:
    return [
        {"name": "script", "configMap": {"name": f"{job_name(run.id)}-script"}},
        {"name": "runs", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]


def render(run: Run, spec: LaunchSpec, files: RunFiles) -> str:
    import yaml

    documents = manifests(run, spec, files)
    header = (
        f"# Kubeflow {documents[1]['kind']} for jiyu run {run.id} ({run.name!r}), exported from {run.notebook!r}.\n"
    )
    return header + yaml.safe_dump_all(documents, sort_keys=False, width=120)
