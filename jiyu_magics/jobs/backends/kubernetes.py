"""A Kubeflow Training Operator ``PyTorchJob`` (plus the ConfigMap holding the exported script).

One Master and ``nnodes - 1`` Workers, each pod one node running ``torchrun`` for its
``nproc`` ranks with ``nvidia.com/gpu: nproc``. The operator sets ``MASTER_ADDR``/``MASTER_PORT``
and ``PET_NODE_RANK`` in every pod; the run's home folder sits on a shared volume so events and
checkpoints outlive the pods.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.run_files import HOME_ENV, RUN_ID_ENV, RunFiles
from ...core.run_store import Run
from ..process import torchrun_command as torchrun
from ..launch_spec import LaunchSpec

TOOL = "kubectl"
SUBMIT_ARGS = ("apply", "-f")
MANIFEST_NAME = "pytorchjob.yaml"
# The image built from images/ (override with JIYU_IMAGE), and the claim of the shared volume.
DEFAULT_IMAGE = "jiyu/pytorch-lab:2.13.0-cuda13.0"
DEFAULT_CLAIM = "jiyu-runs"
POD_HOME, POD_SCRIPT_DIR, POD_WORKDIR = "/jiyu", "/jiyu-job", "/workspace"


def manifests(run: Run, spec: LaunchSpec, files: RunFiles, image: str | None = None,
              claim: str | None = None) -> list[dict]:
    name = f"jiyu-{run.id}"
    image = image or os.environ.get("JIYU_IMAGE") or DEFAULT_IMAGE
    claim = claim or os.environ.get("JIYU_K8S_CLAIM") or DEFAULT_CLAIM
    labels = {"app.kubernetes.io/managed-by": "jiyu", "jiyu/run-id": run.id}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"{name}-script", "labels": labels},
                  "data": {"job.py": files.script.read_text()}}
    replicas = {"Master": _replica(1, name, image, claim, run, spec)}
    if spec.nnodes > 1:
        replicas["Worker"] = _replica(spec.nnodes - 1, name, image, claim, run, spec)
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": name, "labels": labels},
           "spec": {"nprocPerNode": str(spec.nproc),
                    "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": spec.max_restarts},
                    "pytorchReplicaSpecs": replicas}}
    return [config_map, job]


def _replica(count: int, name: str, image: str, claim: str, run: Run, spec: LaunchSpec) -> dict:
    script = f"{POD_SCRIPT_DIR}/job.py"
    if spec.nnodes == 1:
        cmd = torchrun.command(script, spec.nproc, max_restarts=spec.max_restarts, launcher=["torchrun"])
    else:  # static rendezvous at the Master's service, node ranks as the operator numbers the pods
        cmd = torchrun.command(script, spec.nproc, nnodes=spec.nnodes, rdzv_endpoint="$(MASTER_ADDR):$(MASTER_PORT)",
                               node_rank=0, max_restarts=spec.max_restarts, launcher=["torchrun"])
        cmd[cmd.index("--node-rank") + 1] = "$(PET_NODE_RANK)"
    container = {
        "name": "pytorch",  # the operator finds the training container by this name
        "image": image, "command": cmd[:1], "args": cmd[1:], "workingDir": POD_WORKDIR,
        "env": [{"name": RUN_ID_ENV, "value": run.id}, {"name": HOME_ENV, "value": POD_HOME},
                {"name": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "value": torchrun.LINE_PREFIX_TEMPLATE},
                *({"name": k, "value": v} for k, v in torchrun.STORE_SETTINGS.items())],
        "resources": {"limits": {"nvidia.com/gpu": spec.nproc}},
        "volumeMounts": [{"name": "script", "mountPath": POD_SCRIPT_DIR, "readOnly": True},
                         {"name": "runs", "mountPath": POD_HOME},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    volumes = [{"name": "script", "configMap": {"name": f"{name}-script"}},
               {"name": "runs", "persistentVolumeClaim": {"claimName": claim}},
               {"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    return {"replicas": count, "restartPolicy": "OnFailure",
            "template": {"metadata": {"labels": {"jiyu/run-id": run.id}},
                         "spec": {"containers": [container], "volumes": volumes}}}


def render(run: Run, spec: LaunchSpec, files: RunFiles) -> str:
    import yaml

    header = f"# Kubeflow PyTorchJob for jiyu run {run.id} ({run.name!r}), exported from {run.notebook!r}.\n"
    return header + yaml.safe_dump_all(manifests(run, spec, files), sort_keys=False, width=120)


def write_spec(run: Run, spec: LaunchSpec, files: RunFiles) -> Path:
    path = files.root / MANIFEST_NAME
    path.write_text(render(run, spec, files))
    return path


def manual_instructions(path: Path) -> str:
    return f"kubectl is not installed here; apply this manifest with `kubectl apply -f {path}`:\n\n{path.read_text()}"
